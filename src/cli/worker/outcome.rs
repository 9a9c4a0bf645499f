//! The outcome line of a visit command: the last line of its stdout on a
//! `visits.*` queue, a JSON object turned into a `fairway.v1.VisitOutcome`.

use anyhow::{Context, bail};

use fairway::proto::v1 as pb;

/// The outcome a visit command printed as its last line, for the origin
/// named by the line's `url`, else by the task payload's `url`.
pub(super) fn visit_outcome(line: &str, payload: &[u8]) -> anyhow::Result<pb::VisitOutcome> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Line {
        status: String,
        #[serde(default)]
        snapshot: String,
        #[serde(default)]
        url: String,
        /// RFC 3339: the date of the newest change the snapshot holds.
        #[serde(default)]
        newest_change: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct Payload {
        url: String,
    }
    let parsed: Line = serde_json::from_str(line).context("not a JSON object with \"status\"")?;
    let origin_url = match parsed.url {
        url if !url.is_empty() => url,
        _ => {
            serde_json::from_slice::<Payload>(payload)
                .context("no \"url\" in the outcome line, and the payload is not a JSON object with one")?
                .url
        }
    };
    let status = match parsed.status.as_str() {
        "eventful" => pb::VisitStatus::Eventful,
        "uneventful" => pb::VisitStatus::Uneventful,
        "failed" => pb::VisitStatus::Failed,
        "not_found" => pb::VisitStatus::NotFound,
        other => bail!("status {other:?}: expected eventful, uneventful, failed or not_found"),
    };
    let snapshot = hex(&parsed.snapshot).context("snapshot: expected hexadecimal digits")?;
    let newest_change = parsed
        .newest_change
        .map(|text| {
            chrono::DateTime::parse_from_rfc3339(&text)
                .map(|at| prost_types::Timestamp { seconds: at.timestamp(), nanos: at.timestamp_subsec_nanos() as i32 })
                .with_context(|| {
                    format!("newest_change {text:?}: expected an RFC 3339 date, e.g. 2026-12-06T17:00:00Z")
                })
        })
        .transpose()?;
    Ok(pb::VisitOutcome {
        status: status as i32,
        snapshot,
        // Unset: the server's time of the completion, so that the dates of
        // one origin's visits come from one clock whatever worker made them.
        visit_date: None,
        origin_url,
        newest_change,
    })
}

fn hex(text: &str) -> anyhow::Result<Vec<u8>> {
    if !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("not all hexadecimal digits");
    }
    if !text.len().is_multiple_of(2) {
        bail!("an odd number of digits");
    }
    (0..text.len()).step_by(2).map(|i| Ok(u8::from_str_radix(&text[i..i + 2], 16)?)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_lines_are_parsed_or_named_wrong() {
        let payload = br#"{"url": "https://forge.example/a", "visit_type": "git"}"#;
        let outcome = visit_outcome(r#"{"status": "eventful", "snapshot": "0aff"}"#, payload).unwrap();
        assert_eq!(outcome.status, pb::VisitStatus::Eventful as i32);
        assert_eq!(outcome.snapshot, vec![0x0a, 0xff]);
        assert_eq!(outcome.origin_url, "https://forge.example/a", "from the payload");
        let named = visit_outcome(r#"{"status": "failed", "url": "https://other.example/b"}"#, payload).unwrap();
        assert_eq!(named.origin_url, "https://other.example/b", "the line's own url first");
        assert!(visit_outcome(r#"{"status": "not_found"}"#, payload).unwrap().snapshot.is_empty());
        let bad = visit_outcome(r#"{"status": "great"}"#, payload).unwrap_err().to_string();
        assert!(bad.contains("great") && bad.contains("not_found"), "{bad}");
        assert!(visit_outcome(r#"{"status": "eventful", "snapshot": "abc"}"#, payload).is_err());
        // Not digits: refused, not a panic on a cut inside a character.
        for snapshot in ["aéb", "+f", "éé", " 0a"] {
            let line = format!(r#"{{"status": "eventful", "snapshot": "{snapshot}"}}"#);
            assert!(visit_outcome(&line, payload).is_err(), "{snapshot:?}");
        }
        assert!(visit_outcome("done", payload).is_err());
        let dated = visit_outcome(
            r#"{"status": "eventful", "snapshot": "01", "newest_change": "2026-12-01T10:00:00+01:00"}"#,
            payload,
        )
        .unwrap();
        assert_eq!(dated.newest_change.map(|t| t.seconds), Some(1_796_115_600), "2026-12-01T09:00:00Z");
        let undated =
            visit_outcome(r#"{"status": "eventful", "snapshot": "01", "newest_change": "yesterday"}"#, payload)
                .unwrap_err();
        assert!(format!("{undated:#}").contains("RFC 3339"), "{undated:#}");
        let no_url = visit_outcome(r#"{"status": "failed"}"#, b"opaque").unwrap_err().to_string();
        assert!(no_url.contains("url"), "{no_url}");
    }
}
