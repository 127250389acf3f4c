//! mkfs under crashes: at every crash point of formatting over an existing augefs image, the
//! image opens as the old file system intact, as the new one complete, or not at all (never
//! as a half-new file system, never as "corrupted").

use device::recording::{CrashPolicy, RecordingBackend};
use device::Device;
use engine::image::{read_checkpoints, read_superblock};
use engine::mkfs::{format, MkfsOptions};
use engine::progress::NoProgress;
use engine::EngineError;
use format::constants::MIB;
use format::FormatError;

const OLD: [u8; 16] = [0xaa; 16];
const NEW: [u8; 16] = [0xbb; 16];

fn opts(uuid: [u8; 16], domains: u32) -> MkfsOptions {
    MkfsOptions {
        domain_count: Some(domains),
        fs_uuid: uuid,
        created_unix_ns: 1,
        force: true,
        label: String::new(),
    }
}

#[test]
fn every_crash_point_of_mkfs_leaves_old_new_or_nothing() {
    let (first, first_handle) = RecordingBackend::new(vec![0; (64 * MIB) as usize], 512);
    format(
        &Device::new(Box::new(first)),
        None,
        &opts(OLD, 2),
        &NoProgress,
    )
    .expect("first mkfs");
    let old_image = first_handle.current_image();

    let (backend, handle) = RecordingBackend::new(old_image, 512);
    let dev = Device::new(Box::new(backend));
    // A different domain count moves the checkpoint owners: a half-new image would show.
    format(&dev, None, &opts(NEW, 3), &NoProgress).expect("second mkfs");

    let recording = handle.snapshot();
    let states = recording.crash_states(&CrashPolicy {
        states_max: 1500,
        ..CrashPolicy::with_seed(7)
    });
    assert!(
        states.states.len() > 20,
        "too few crash states: {}",
        states.states.len()
    );
    eprintln!(
        "{} crash states ({} candidates, {} skipped)",
        states.states.len(),
        states.candidates_count,
        states.skipped_count
    );
    let (mut saw_old, mut saw_new, mut saw_none) = (0, 0, 0);
    for state in &states.states {
        let crashed = recording.device(state, 512);
        match read_superblock(&crashed) {
            Ok(choice) => {
                let sb = choice.superblock;
                let cps = read_checkpoints(&crashed, &sb.geometry).expect("checkpoints readable");
                assert!(
                    cps.iter().all(|cp| cp.current.is_some()),
                    "state {state}: superblock {:?} opens but a checkpoint is missing",
                    sb.fs_uuid
                );
                if sb.fs_uuid == OLD {
                    assert_eq!(sb.geometry.domain_count, 2, "state {state}");
                    saw_old += 1;
                } else {
                    assert_eq!(sb.fs_uuid, NEW, "state {state}");
                    assert_eq!(sb.geometry.domain_count, 3, "state {state}");
                    saw_new += 1;
                }
            }
            Err(EngineError::Format(FormatError::NotAugefs { .. })) => saw_none += 1,
            Err(e) => panic!("state {state}: image reports {e}"),
        }
    }
    assert!(
        saw_old > 0 && saw_new > 0 && saw_none > 0,
        "old {saw_old} new {saw_new} none {saw_none}"
    );
}

/// `augefs tune` under crashes: at every crash point of a label and uuid change, the
/// image opens with the old identity or the new one, never a mix and never damaged.
#[test]
fn every_crash_point_of_a_label_change_leaves_old_or_new() {
    let (first, first_handle) = RecordingBackend::new(vec![0; (64 * MIB) as usize], 512);
    let mut o = opts(OLD, 2);
    o.label = "old".into();
    format(&Device::new(Box::new(first)), None, &o, &NoProgress).expect("mkfs");
    let (backend, handle) = RecordingBackend::new(first_handle.current_image(), 512);
    let dev = Device::new(Box::new(backend));
    engine::image::set_identity(&dev, Some("new"), Some(NEW)).expect("tune");
    let recording = handle.snapshot();
    let states = recording.crash_states(&CrashPolicy {
        states_max: 500,
        ..CrashPolicy::with_seed(11)
    });
    assert!(states.states.len() >= 3, "{} states", states.states.len());
    let (mut saw_old, mut saw_new) = (0, 0);
    for state in &states.states {
        let crashed = recording.device(state, 512);
        let sb = read_superblock(&crashed)
            .unwrap_or_else(|e| panic!("state {state}: {e}"))
            .superblock;
        match (sb.label.as_str(), sb.fs_uuid) {
            ("old", OLD) => saw_old += 1,
            ("new", NEW) => saw_new += 1,
            other => panic!("state {state}: a mixed identity {other:?}"),
        }
    }
    assert!(saw_old > 0 && saw_new > 0, "old {saw_old}, new {saw_new}");
}
