//! Block hashes parsed exactly as specified.

use super::*;

#[test]
fn block_hashes_parse_exactly_as_specified() {
    let mut total = 0;
    let text = || {
        prop_oneof![
            "[0-9a-fA-F]{16}",
            "[0-9a-fA-F]{0,20}",
            "[0-9a-fA-FxXg+ -]{0,20}",
            ".{0,40}",
        ]
    };
    total += fuzz("block hash text", cases(2000), text, |s| {
        let parsed = s.parse::<BlockHash>();
        let valid = s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit());
        prop_assert_eq!(parsed.is_ok(), valid, "{:?}", s);
        match parsed {
            Ok(h) => {
                prop_assert_eq!(h.0, u64::from_str_radix(&s, 16).unwrap());
                prop_assert_eq!(h.to_hex(), s.to_ascii_lowercase());
                prop_assert_eq!(h.to_hex().parse::<BlockHash>().unwrap(), h);
            }
            Err(e) => prop_assert!(e.0.chars().count() <= 40, "error quotes {:?}", e.0),
        }
        Ok(())
    });
    total += fuzz("block hash u64", cases(500), any::<u64>, |n| {
        let h = BlockHash(n);
        prop_assert_eq!(h.to_hex().len(), 16);
        prop_assert_eq!(h.to_hex().parse::<BlockHash>().unwrap(), h);
        let from_json: BlockHash = serde_json::from_value(json!(n)).unwrap();
        prop_assert_eq!(from_json, h);
        let from_hex: BlockHash = serde_json::from_value(json!(h.to_hex())).unwrap();
        prop_assert_eq!(from_hex, h);
        prop_assert_eq!(serde_json::to_value(h).unwrap(), json!(h.to_hex()));
        Ok(())
    });
    total += fuzz(
        "block hash JSON",
        cases(1000),
        || prop_oneof![arb_hash(), arb_json()],
        |v| {
            let parsed = serde_json::from_value::<BlockHash>(v.clone());
            let valid = match &v {
                Value::Number(n) => n.as_u64().is_some(),
                Value::String(s) => s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit()),
                _ => false,
            };
            prop_assert_eq!(parsed.is_ok(), valid, "{}", v);
            Ok(())
        },
    );
    // Raw JSON text of hash lists, including numbers no JSON value holds.
    let raw = || {
        prop_oneof![
            proptest::collection::vec(
                prop_oneof![
                    any::<u64>().prop_map(|n| n.to_string()),
                    "-?[0-9]{1,25}(\\.[0-9]{0,3})?(e[+-]?[0-9]{1,3})?",
                    "\"[0-9a-fA-Fx]{0,18}\"",
                    Just("null".to_owned()),
                ],
                0..10,
            )
            .prop_map(|items| format!("[{}]", items.join(","))),
            ".{0,40}",
        ]
    };
    total += fuzz("block hash list text", cases(1000), raw, |text| {
        let _ = serde_json::from_str::<Vec<BlockHash>>(&text);
        Ok(())
    });
    println!("fuzz executions: block hash total: {total}");
}
