//! `augefs bench device` runs end to end: our figures and fio's on one small file, with
//! ratios. (Speed is not asserted: these machines are noisy; the figures go in notes.)

use std::process::Command;

#[test]
fn bench_device_prints_figures_and_ratios() {
    let dir = testsupport::scratch!();
    let file = dir.path().join("bench.img");
    let out = Command::new(env!("CARGO_BIN_EXE_augefs-bench"))
        .args([
            "device",
            file.to_str().expect("utf-8"),
            "--size",
            "64M",
            "--runs",
            "1",
            "--seconds",
            "1",
            "--json",
        ])
        .output()
        .expect("augefs-bench runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("JSON output");
    let text = json.to_string();
    for figure in ["random read", "fdatasync", "sequential write"] {
        assert!(text.contains(figure), "{figure} missing: {text}");
    }
    let fio_present = Command::new("fio")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if fio_present {
        assert!(
            text.contains("ratio"),
            "ratios missing although fio is installed: {text}"
        );
    }
}
