//! Lower-case hex, the one spelling of tags, keys and hashes (base16ct: no
//! allocation per byte, constant time).

/// `bytes` in lower-case hex.
pub(crate) fn encode(bytes: &[u8]) -> String {
    base16ct::lower::encode_string(bytes)
}

/// The bytes of lower-case hex `text`; anything else is `None`.
pub(crate) fn decode(text: &str) -> Option<Vec<u8>> {
    base16ct::lower::decode_vec(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lower_case_hex_round_trips_and_nothing_else_decodes() {
        assert_eq!(encode(&[0x00, 0x9f, 0xa0, 0xff]), "009fa0ff");
        assert_eq!(decode("009fa0ff"), Some(vec![0x00, 0x9f, 0xa0, 0xff]));
        for bad in ["009FA0FF", "0", "0g", " 00", "00 "] {
            assert_eq!(decode(bad), None, "{bad:?}");
        }
    }
}
