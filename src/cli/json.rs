//! `--json`: a read command's answer as the canonical proto3 JSON of the
//! response message (fields in lowerCamelCase, 64-bit integers as strings,
//! times as RFC 3339), for scripts; the same shape a gRPC client gets.

use prost_reflect::{DescriptorPool, DynamicMessage, SerializeOptions};

/// Prints `message`, of the type `full_name` (`fairway.v1.…`), as JSON on
/// one line.
pub(super) fn print<M: prost::Message>(message: &M, full_name: &str) -> anyhow::Result<()> {
    println!("{}", render(message, full_name)?);
    Ok(())
}

fn render<M: prost::Message>(message: &M, full_name: &str) -> anyhow::Result<String> {
    let pool = DescriptorPool::decode(fairway::proto::FILE_DESCRIPTOR_SET)?;
    let descriptor =
        pool.get_message_by_name(full_name).ok_or_else(|| anyhow::anyhow!("no message {full_name} in the API"))?;
    let dynamic = DynamicMessage::decode(descriptor, message.encode_to_vec().as_slice())?;
    let options = SerializeOptions::new().skip_default_fields(false);
    let mut out = serde_json::Serializer::new(Vec::new());
    dynamic.serialize_with_options(&mut out, &options)?;
    Ok(String::from_utf8(out.into_inner())?)
}

#[cfg(test)]
mod tests {
    use super::render;
    use fairway::proto::v1 as pb;

    #[test]
    fn a_response_renders_as_the_canonical_json_of_its_message() {
        let response = pb::ListQueuesResponse {
            queues: vec![pb::QueueSummary {
                queue: "jobs".into(),
                partitions: 2,
                backlog: 7,
                oldest_added_at: Some(prost_types::Timestamp { seconds: 1_767_225_600, nanos: 0 }),
                ..Default::default()
            }],
            next_page_token: String::new(),
        };
        let json: serde_json::Value =
            serde_json::from_str(&render(&response, "fairway.v1.ListQueuesResponse").unwrap()).unwrap();
        let queue = &json["queues"][0];
        assert_eq!(queue["queue"], "jobs");
        assert_eq!(queue["backlog"], "7", "64-bit integers are strings in proto3 JSON");
        assert_eq!(queue["oldestAddedAt"], "2026-01-01T00:00:00Z");
        assert_eq!(queue["heldHere"], 0, "fields at their defaults are written too");
        assert!(render(&response, "fairway.v1.Nothing").is_err());
    }
}
