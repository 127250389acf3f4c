//! include/augefs.h declares exactly the functions src/lib.rs exports.

#[test]
fn header_matches_the_exports() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let lib = std::fs::read_to_string(format!("{dir}/src/lib.rs")).unwrap();
    let header = std::fs::read_to_string(format!("{dir}/include/augefs.h")).unwrap();
    let names = |text: &str, marker: &str| -> Vec<String> {
        let mut v: Vec<String> = text
            .split(marker)
            .skip(1)
            .filter_map(|rest| rest.split('(').next())
            .map(|n| n.trim().trim_start_matches('*').to_string())
            .filter(|n| n.starts_with("augefs_"))
            .collect();
        v.sort();
        v
    };
    let exported = names(&lib, "extern \"C\" fn ");
    let declared: Vec<String> = {
        let mut v: Vec<String> = header
            .lines()
            .filter(|l| l.contains('('))
            .filter_map(|l| l.split('(').next())
            .filter_map(|l| l.split_whitespace().last())
            .map(|n| n.trim_start_matches('*').to_string())
            .filter(|n| n.starts_with("augefs_"))
            .collect();
        v.sort();
        v
    };
    assert_eq!(exported, declared);
    assert!(exported.len() >= 15);
}
