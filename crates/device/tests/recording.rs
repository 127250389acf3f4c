//! Scenario tests of the recording, fault-injecting device: exact crash-state sets for
//! known write/flush sequences, torn writes, write order, fault injection, the state cap,
//! determinism, and accounting through `Device`.

use device::recording::{
    CrashPolicy, CrashState, Event, FaultPlan, RecordingBackend, RecordingHandle, TornWrite,
    WriteData, WriteId,
};
use device::{AlignedBuf, Device, DeviceError, IoCause, IoRequest};
use platform::Rng;
use std::collections::{BTreeMap, BTreeSet};

const BLOCK: usize = 4096;

fn recording_device(blocks: usize) -> (Device, RecordingHandle) {
    let (backend, handle) = RecordingBackend::new(vec![0; blocks * BLOCK], 512);
    (Device::new(Box::new(backend)), handle)
}

/// A write of `blocks` 4 KiB blocks of `byte` at block `at`.
fn write(at: usize, blocks: usize, byte: u8) -> IoRequest {
    let buf = AlignedBuf::from_slice(&vec![byte; blocks * BLOCK]);
    IoRequest::write((at * BLOCK) as u64, buf, IoCause::UserData)
}

fn flush() -> IoRequest {
    IoRequest::flush(IoCause::UserData)
}

/// An image whose 4 KiB blocks are filled with the given bytes.
fn image(blocks: &[u8]) -> Vec<u8> {
    blocks.iter().flat_map(|&b| vec![b; BLOCK]).collect()
}

fn run_ok(device: &Device, requests: Vec<IoRequest>) {
    for completion in device.run(requests).expect("requests succeed") {
        completion.result.expect("request succeeds");
    }
}

/// Every enumerated state, printed, with its image.
fn states_and_images(handle: &RecordingHandle, policy: &CrashPolicy) -> BTreeMap<String, Vec<u8>> {
    let recording = handle.snapshot();
    let states = recording.crash_states(policy);
    assert_eq!(states.skipped_count, 0, "no cap expected here");
    let map: BTreeMap<String, Vec<u8>> = states
        .states
        .iter()
        .map(|s| (s.to_string(), recording.image(s)))
        .collect();
    assert_eq!(map.len(), states.states.len(), "states are distinct");
    map
}

fn expected(pairs: &[(&str, &[u8])]) -> BTreeMap<String, Vec<u8>> {
    pairs
        .iter()
        .map(|(name, blocks)| (name.to_string(), image(blocks)))
        .collect()
}

#[test]
fn in_flight_writes_give_every_subset_over_the_flushed_prefix() {
    let (device, handle) = recording_device(4);
    // W0 = A at block 0; flush; W1 = B at block 1 and W2 = C at block 2 in flight.
    run_ok(
        &device,
        vec![
            write(0, 1, 0xA),
            flush(),
            write(1, 1, 0xB),
            write(2, 1, 0xC),
        ],
    );

    let got = states_and_images(&handle, &CrashPolicy::default());
    let want = expected(&[
        ("d0", &[0, 0, 0, 0]),        // initial
        ("d1", &[0xA, 0, 0, 0]),      // right after the flush: {W0}
        ("d2", &[0xA, 0xB, 0, 0]),    // {W0, W1}
        ("d1 +2", &[0xA, 0, 0xC, 0]), // {W0, W2}
        ("d3", &[0xA, 0xB, 0xC, 0]),  // {W0, W1, W2}
    ]);
    assert_eq!(got, want);
    assert_eq!(handle.image_after_all(), image(&[0xA, 0xB, 0xC, 0]));
}

#[test]
fn torn_write_gives_its_block_subsets_with_and_without_the_others() {
    let (device, handle) = recording_device(4);
    // W0 = A at 0; flush; W1 = B over blocks 1-2 (8 KiB) and W2 = C at block 3 in flight.
    run_ok(
        &device,
        vec![
            write(0, 1, 0xA),
            flush(),
            write(1, 2, 0xB),
            write(3, 1, 0xC),
        ],
    );

    let got = states_and_images(&handle, &CrashPolicy::default());
    let want = expected(&[
        ("d0", &[0, 0, 0, 0]),
        ("d1", &[0xA, 0, 0, 0]),
        ("d2", &[0xA, 0xB, 0xB, 0]),
        ("d1 +2", &[0xA, 0, 0, 0xC]),
        ("d3", &[0xA, 0xB, 0xB, 0xC]),
        // W1 torn: only its first block, or only its second, W2 absent or present.
        ("d1 ~1[0]", &[0xA, 0xB, 0, 0]),
        ("d1 ~1[1]", &[0xA, 0, 0xB, 0]),
        ("d1 ~1[0] +2", &[0xA, 0xB, 0, 0xC]),
        ("d1 ~1[1] +2", &[0xA, 0, 0xB, 0xC]),
    ]);
    assert_eq!(got, want);

    let without_torn = CrashPolicy {
        torn_writes: false,
        ..CrashPolicy::default()
    };
    let names: BTreeSet<String> = states_and_images(&handle, &without_torn)
        .into_keys()
        .collect();
    assert_eq!(
        names,
        ["d0", "d1", "d1 +2", "d2", "d3"].map(String::from).into()
    );
}

#[test]
fn writes_tear_at_device_4k_boundaries_not_at_their_own() {
    let (backend, handle) = RecordingBackend::new(vec![0; 3 * BLOCK], 512);
    let device = Device::new(Box::new(backend));
    // 4 KiB at byte 2048: half of block 0 and half of block 1.
    let buf = AlignedBuf::from_slice(&[7u8; BLOCK]);
    device.write(2048, buf, IoCause::UserData).expect("write");
    let recording = handle.snapshot();
    let w = recording.write(WriteId(0));
    assert_eq!(w.block_count(), 2);
    assert_eq!(w.block_range(0), (2048, 4096));
    assert_eq!(w.block_range(1), (4096, 6144));

    let torn = CrashState::new(0, [], [TornWrite::new(WriteId(0), [1])]);
    let mut want = vec![0u8; 3 * BLOCK];
    want[4096..6144].fill(7);
    assert_eq!(recording.image(&torn), want);
}

#[test]
fn overlapping_writes_apply_in_issue_order() {
    let (device, handle) = recording_device(2);
    // W0 = A over blocks 0-1, then W1 = B over block 1, nothing flushed.
    run_ok(&device, vec![write(0, 2, 0xA), write(1, 1, 0xB)]);

    let got = states_and_images(&handle, &CrashPolicy::default());
    let want = expected(&[
        ("d0", &[0, 0]),
        ("d1", &[0xA, 0xA]),
        ("d0 +1", &[0, 0xB]),
        ("d2", &[0xA, 0xB]), // the later write wins where they overlap
        ("d0 ~0[0]", &[0xA, 0]),
        ("d0 ~0[1]", &[0, 0xA]),
        ("d0 ~0[0] +1", &[0xA, 0xB]),
        ("d0 ~0[1] +1", &[0, 0xB]),
    ]);
    assert_eq!(got, want);
    // An explicit state with both writes listed whole is the same state as d2.
    let both = CrashState::new(0, [WriteId(1), WriteId(0)], []);
    assert_eq!(both, CrashState::durable_prefix(2));
    assert_eq!(handle.image(&both), image(&[0xA, 0xB]));
}

#[test]
fn large_window_gives_prefixes_and_single_omissions() {
    let (device, handle) = recording_device(8);
    run_ok(&device, (0..8).map(|i| write(i, 1, i as u8 + 1)).collect());
    let policy = CrashPolicy {
        random_subsets_count: 0,
        ..CrashPolicy::default()
    };
    assert!(policy.exhaustive_writes_max < 8);

    let got: BTreeSet<String> = states_and_images(&handle, &policy).into_keys().collect();
    let mut want: BTreeSet<String> = (0..=8).map(|p| format!("d{p}")).collect();
    for omitted in 0..7 {
        // Omitting the last write is the prefix d7, already listed.
        let after = if omitted + 1 == 7 {
            "7".to_string()
        } else {
            format!("{}-7", omitted + 1)
        };
        want.insert(format!("d{omitted} +{after}"));
    }
    assert_eq!(got, want);

    let with_random = CrashPolicy {
        random_subsets_count: 5,
        ..policy
    };
    let states = handle.crash_states(&with_random);
    assert!(states.candidates_count >= 17 && states.candidates_count <= 17 + 5);
}

#[test]
fn long_torn_write_gets_spaced_prefixes_and_random_subsets() {
    let (device, handle) = recording_device(10);
    run_ok(&device, vec![write(0, 10, 0xE)]);
    let policy = CrashPolicy {
        torn_prefixes_max: 3,
        torn_random_subsets_count: 4,
        seed: 11,
        ..CrashPolicy::default()
    };
    let states = handle.crash_states(&policy).states;
    let names: BTreeSet<String> = states.iter().map(ToString::to_string).collect();
    for prefix in ["d0 ~0[0]", "d0 ~0[0-4]", "d0 ~0[0-8]"] {
        assert!(names.contains(prefix), "{prefix} missing from {names:?}");
    }
    let torn: Vec<&TornWrite> = states.iter().flat_map(|s| s.torn()).collect();
    assert!(torn.len() > 3 && torn.len() <= 3 + 4, "{names:?}");
    for t in torn {
        assert!(
            !t.blocks().is_empty() && t.blocks().len() < 10,
            "proper subset: {t:?}"
        );
    }
}

#[test]
fn every_image_matches_a_naive_replay() {
    let (device, handle) = recording_device(8);
    let mut rng = Rng::from_seed(5);
    for step in 0..40u8 {
        let request = match rng.below(6) {
            0 => flush(),
            1 => IoRequest::discard(rng.below(8) * BLOCK as u64, BLOCK as u64, IoCause::Gc),
            _ => {
                let at = rng.below(7) as usize;
                let blocks = 1 + rng.below(2) as usize;
                write(at.min(8 - blocks), blocks, step + 1)
            }
        };
        run_ok(&device, vec![request]);
    }
    let recording = handle.snapshot();
    let states = recording.crash_states(&CrashPolicy::with_seed(3));
    assert!(states.states.len() > 40);
    for state in &states.states {
        let mut naive = recording.initial_image().to_vec();
        for (i, w) in recording.writes().iter().enumerate() {
            let id = WriteId(i as u64);
            let blocks: Vec<u32> = if state.includes_whole(id) {
                (0..w.block_count()).collect()
            } else {
                state
                    .torn()
                    .iter()
                    .filter(|t| t.write() == id)
                    .flat_map(|t| t.blocks().to_vec())
                    .collect()
            };
            for block in blocks {
                let (start, end) = w.block_range(block);
                let range = start as usize..end as usize;
                match &w.data {
                    WriteData::Bytes(bytes) => naive[range].copy_from_slice(
                        &bytes[(start - w.offset) as usize..(end - w.offset) as usize],
                    ),
                    WriteData::Zeros { .. } => naive[range].fill(0),
                }
            }
        }
        assert!(
            recording.image(state) == naive,
            "image of {state} differs from replay"
        );
        // The copy-on-write device of the state reads the same bytes, whole and a block
        // at a time.
        let crashed = recording.device(state, 512);
        let whole = crashed
            .read(0, AlignedBuf::zeroed(naive.len()), IoCause::Tool)
            .expect("read");
        assert!(
            whole[..] == naive[..],
            "device of {state} differs from replay"
        );
        for (i, block) in naive.chunks(BLOCK).enumerate() {
            let got = crashed
                .read((i * BLOCK) as u64, AlignedBuf::zeroed(BLOCK), IoCause::Tool)
                .expect("read");
            assert!(got[..] == *block, "device of {state}, block {i}");
        }
    }
    assert_eq!(recording.image_after_all(), handle.current_image());
}

#[test]
fn reads_see_every_write_and_discards_are_zeros_until_durable() {
    let (device, handle) = recording_device(4);
    run_ok(&device, vec![write(0, 2, 0xA), flush(), write(1, 1, 0xB)]);
    device
        .discard(0, BLOCK as u64, IoCause::Gc)
        .expect("discard");

    let read = device
        .read(0, AlignedBuf::zeroed(4 * BLOCK), IoCause::UserData)
        .expect("read");
    assert_eq!(&read[..], &image(&[0, 0xB, 0, 0])[..]);
    assert_eq!(handle.current_image(), image(&[0, 0xB, 0, 0]));
    assert_eq!(handle.image_after_all(), handle.current_image());

    let recording = handle.snapshot();
    assert!(recording.write(WriteId(2)).is_discard());
    let names: BTreeSet<String> = states_and_images(&handle, &CrashPolicy::default())
        .into_keys()
        .collect();
    // W0 may tear before the flush; the discard (W2) may or may not have landed, with or
    // without W1.
    let want = ["d0", "d0 ~0[0]", "d0 ~0[1]", "d1", "d2", "d1 +2", "d3"]
        .map(String::from)
        .into();
    assert_eq!(names, want);
    assert_eq!(
        handle.image(&"d1 +2".parse().expect("parses")),
        image(&[0, 0xA, 0, 0])
    );
}

#[test]
fn flush_in_the_same_submit_as_a_write_does_not_cover_it() {
    let (device, handle) = recording_device(2);
    let mut queue = device.queue().expect("queue");
    queue.push(write(0, 1, 0xA)).expect("room");
    queue.push(flush()).expect("room");
    queue.submit(2).expect("submit");
    while let Some(c) = queue.pop() {
        c.result.expect("succeeds");
    }
    drop(queue);
    assert_eq!(
        handle.events(),
        vec![Event::Write { id: WriteId(0) }, Event::Flush { covers: 0 }]
    );
    let names: BTreeSet<String> = states_and_images(&handle, &CrashPolicy::default())
        .into_keys()
        .collect();
    assert_eq!(names, ["d0", "d1"].map(String::from).into());

    // A flush submitted after the write completed covers it.
    device.flush(IoCause::UserData).expect("flush");
    assert_eq!(handle.events().last(), Some(&Event::Flush { covers: 1 }));
    let epochs = handle.snapshot().epochs();
    assert_eq!(
        epochs.last().map(|e| (e.durable_writes, e.end_writes)),
        Some((1, 1))
    );
}

#[test]
fn injected_write_failure_returns_eio_applies_nothing_and_later_io_works() {
    let (device, handle) = recording_device(4);
    run_ok(&device, vec![write(0, 1, 0xA), flush()]);
    handle.set_fault(FaultPlan::FailWrite { nth: 2 });

    let mut queue = device.queue().expect("queue");
    for (i, byte) in [0xB, 0xC, 0xD].into_iter().enumerate() {
        queue.push(write(i + 1, 1, byte)).expect("room");
    }
    queue.submit(3).expect("submit");
    let mut results = Vec::new();
    while let Some(c) = queue.pop() {
        results.push((c.request.op.range().map(|r| r.0), c.result));
    }
    drop(queue);
    assert_eq!(results.len(), 3);
    let failed: Vec<_> = results.iter().filter(|(_, r)| r.is_err()).collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(
        failed[0].0,
        Some(2 * BLOCK as u64),
        "the second write failed"
    );
    match &failed[0].1 {
        Err(
            e @ DeviceError::Injected {
                op: "write",
                nth: 2,
            },
        ) => assert_eq!(e.errno(), libc::EIO),
        other => panic!("expected an injected write failure, got {other:?}"),
    }
    assert_eq!(handle.injected_count(), 1);
    assert_eq!(handle.current_image(), image(&[0xA, 0xB, 0, 0xD]));

    // Later IO works, including a rewrite of the failed block.
    run_ok(&device, vec![write(2, 1, 0xE), flush()]);
    assert_eq!(handle.current_image(), image(&[0xA, 0xB, 0xE, 0xD]));
    let recording = handle.snapshot();
    assert_eq!(recording.writes().len(), 4);
    assert!(recording.events().contains(&Event::Failed {
        op: "write",
        nth: 2
    }));
    // No crash state ever holds the failed write's bytes.
    for state in recording.crash_states(&CrashPolicy::default()).states {
        let img = recording.image(&state);
        assert!(
            img[2 * BLOCK..3 * BLOCK].iter().all(|&b| b != 0xC),
            "{state} holds the failed write"
        );
    }
}

#[test]
fn injected_flush_failure_makes_nothing_durable() {
    let (device, handle) = recording_device(2);
    run_ok(&device, vec![write(0, 1, 0xA)]);
    handle.set_fault(FaultPlan::FailFlush { nth: 1 });
    let error = device.flush(IoCause::Wal).expect_err("flush fails");
    assert!(matches!(
        error,
        DeviceError::Injected {
            op: "flush",
            nth: 1
        }
    ));
    assert_eq!(error.errno(), libc::EIO);

    // After the failed flush W0 is still unflushed: a crash may lose it.
    let names: BTreeSet<String> = states_and_images(&handle, &CrashPolicy::default())
        .into_keys()
        .collect();
    assert_eq!(names, ["d0", "d1"].map(String::from).into());

    run_ok(&device, vec![write(1, 1, 0xB), flush()]);
    assert_eq!(
        handle.events(),
        vec![
            Event::Write { id: WriteId(0) },
            Event::Failed {
                op: "flush",
                nth: 1
            },
            Event::Write { id: WriteId(1) },
            Event::Flush { covers: 2 },
        ]
    );
    let got = states_and_images(&handle, &CrashPolicy::default());
    let want = expected(&[
        ("d0", &[0, 0]),
        ("d1", &[0xA, 0]),
        ("d0 +1", &[0, 0xB]),
        ("d2", &[0xA, 0xB]),
    ]);
    assert_eq!(got, want);
}

#[test]
fn dead_device_fails_writes_flushes_and_discards_until_revived() {
    let (device, handle) = recording_device(2);
    handle.set_fault(FaultPlan::DieAtWrite { nth: 2 });
    run_ok(&device, vec![write(0, 1, 0xA)]);
    assert!(!handle.is_dead());
    assert!(device
        .write(BLOCK as u64, AlignedBuf::zeroed(BLOCK), IoCause::Node)
        .is_err());
    assert!(handle.is_dead());
    assert!(matches!(
        device.flush(IoCause::Node),
        Err(DeviceError::Injected {
            op: "flush",
            nth: 1
        })
    ));
    assert!(matches!(
        device.discard(0, BLOCK as u64, IoCause::Gc),
        Err(DeviceError::Injected {
            op: "discard",
            nth: 1
        })
    ));
    assert!(device
        .write(0, AlignedBuf::zeroed(BLOCK), IoCause::Node)
        .is_err());
    // Reads still work and see the one write that landed.
    let read = device
        .read(0, AlignedBuf::zeroed(2 * BLOCK), IoCause::Node)
        .expect("read");
    assert_eq!(&read[..], &image(&[0xA, 0])[..]);
    assert_eq!(handle.injected_count(), 4);
    assert_eq!(handle.write_count(), 1);

    handle.set_fault(FaultPlan::None);
    assert!(!handle.is_dead());
    run_ok(&device, vec![write(1, 1, 0xB), flush()]);
    assert_eq!(handle.current_image(), image(&[0xA, 0xB]));
}

#[test]
fn die_at_flush_kills_the_device_at_that_flush() {
    let (device, handle) = recording_device(2);
    handle.set_fault(FaultPlan::DieAtFlush { nth: 2 });
    run_ok(&device, vec![write(0, 1, 0xA), flush()]);
    assert!(device.flush(IoCause::Wal).is_err());
    assert!(handle.is_dead());
    assert!(device
        .write(BLOCK as u64, AlignedBuf::zeroed(BLOCK), IoCause::Wal)
        .is_err());
    assert_eq!(
        handle.snapshot().epochs().len(),
        2,
        "only the first flush counts"
    );
}

#[test]
fn cap_keeps_flush_states_samples_the_rest_and_reports_skips() {
    let (device, handle) = recording_device(16);
    let mut requests = Vec::new();
    for round in 0..3 {
        for i in 0..10 {
            requests.push(write(i, 2, (round * 10 + i + 1) as u8));
        }
        requests.push(flush());
    }
    run_ok(&device, requests);
    let uncapped = handle.crash_states(&CrashPolicy {
        states_max: usize::MAX,
        ..CrashPolicy::default()
    });
    assert_eq!(uncapped.skipped_count, 0);
    assert!(uncapped.candidates_count > 100);

    let policy = CrashPolicy {
        states_max: 20,
        ..CrashPolicy::default()
    };
    let capped = handle.crash_states(&policy);
    assert_eq!(capped.states.len(), 20);
    assert_eq!(capped.candidates_count, uncapped.candidates_count);
    assert_eq!(capped.skipped_count, capped.candidates_count - 20);
    for flushed in [0, 10, 20, 30] {
        assert!(
            capped.states.contains(&CrashState::durable_prefix(flushed)),
            "d{flushed} kept"
        );
    }
    let all: BTreeSet<&CrashState> = uncapped.states.iter().collect();
    assert!(capped.states.iter().all(|s| all.contains(s)));
    assert!(
        capped.states.windows(2).all(|pair| pair[0] < pair[1]),
        "sorted and distinct"
    );

    // Deterministic for a seed; another seed samples differently.
    assert_eq!(handle.crash_states(&policy), capped);
    let other = handle.crash_states(&CrashPolicy { seed: 99, ..policy });
    assert_eq!(other.candidates_count, capped.candidates_count);
    assert_ne!(other.states, capped.states);
}

#[test]
fn random_choices_are_deterministic_for_a_seed() {
    let (device, handle) = recording_device(16);
    run_ok(&device, (0..12).map(|i| write(i, 4, i as u8 + 1)).collect());
    let a = handle.crash_states(&CrashPolicy::with_seed(7));
    let b = handle.crash_states(&CrashPolicy::with_seed(7));
    let c = handle.crash_states(&CrashPolicy::with_seed(8));
    assert_eq!(a, b);
    assert_ne!(a.states, c.states, "random subsets depend on the seed");
}

#[test]
fn crash_states_print_and_parse_compactly() {
    let state = CrashState::new(
        3,
        [5, 7, 8, 9, 1].map(WriteId),
        [
            TornWrite::new(WriteId(10), [3, 0, 1]),
            TornWrite::new(WriteId(4), [2]),
        ],
    );
    let text = state.to_string();
    assert_eq!(text, "d3 ~4[2] +5 +7-9 ~10[0-1,3]");
    assert_eq!(text.parse::<CrashState>().expect("parses"), state);
    // A landed write right after the prefix extends it.
    assert_eq!(
        CrashState::new(2, [WriteId(2), WriteId(3)], []),
        CrashState::durable_prefix(4)
    );
    assert_eq!(
        "d2 +2-3".parse::<CrashState>().expect("parses").to_string(),
        "d4"
    );
    for bad in [
        "",
        "x1",
        "d1 +3-2",
        "d1 ~0[1]",
        "d1 ~2[]",
        "d1 +2 ~2[0]",
        "d1 ~2[0] ~2[1]",
        "d1 ?",
    ] {
        assert!(
            bad.parse::<CrashState>().is_err(),
            "{bad:?} should not parse"
        );
    }
}

#[test]
fn device_counts_every_request_by_cause() {
    let (device, handle) = recording_device(4);
    run_ok(&device, vec![write(0, 2, 1), flush()]);
    device
        .write(0, AlignedBuf::zeroed(BLOCK), IoCause::Node)
        .expect("write");
    device
        .discard(BLOCK as u64, BLOCK as u64, IoCause::Gc)
        .expect("discard");
    handle.set_fault(FaultPlan::FailWrite { nth: 1 });
    assert!(device
        .write(0, AlignedBuf::zeroed(BLOCK), IoCause::Node)
        .is_err());
    device
        .read(0, AlignedBuf::zeroed(2 * BLOCK), IoCause::Table)
        .expect("read");

    let snapshot = device.counters().snapshot();
    let user = snapshot.cause(IoCause::UserData);
    assert_eq!(
        (user.write_ops, user.write_bytes, user.flush_ops),
        (1, 2 * BLOCK as u64, 1)
    );
    let node = snapshot.cause(IoCause::Node);
    assert_eq!(
        (node.write_ops, node.write_bytes),
        (2, 2 * BLOCK as u64),
        "failed writes count too"
    );
    let gc = snapshot.cause(IoCause::Gc);
    assert_eq!((gc.discard_ops, gc.discard_bytes), (1, BLOCK as u64));
    let table = snapshot.cause(IoCause::Table);
    assert_eq!((table.read_ops, table.read_bytes), (1, 2 * BLOCK as u64));
    assert_eq!(device.info().backend, device::BackendKind::Recording);
    assert_eq!(handle.write_count(), 3);
}

#[test]
fn threads_writing_through_their_own_queues_are_all_recorded() {
    let (device, handle) = recording_device(32);
    std::thread::scope(|scope| {
        for t in 0..4usize {
            let device = &device;
            scope.spawn(move || {
                let requests = (0..8)
                    .map(|i| write(t * 8 + i, 1, (t * 8 + i + 1) as u8))
                    .collect();
                run_ok(device, requests);
                device.flush(IoCause::UserData).expect("flush");
            });
        }
    });
    let recording = handle.snapshot();
    assert_eq!(recording.writes().len(), 32);
    let want: Vec<u8> = (0..32).map(|i| i as u8 + 1).collect();
    assert_eq!(recording.image_after_all(), image(&want));
    assert_eq!(handle.current_image(), image(&want));
    // Every write is durable after the last flush: the last epoch's prefix is all of them.
    assert_eq!(
        recording.epochs().last().map(|e| e.durable_writes),
        Some(32)
    );
}

#[test]
fn durable_writes_is_the_highest_flush_so_far() {
    let (device, handle) = recording_device(4);
    assert_eq!(handle.durable_writes(), 0);
    run_ok(&device, vec![write(0, 1, 1), write(1, 1, 2)]);
    assert_eq!(handle.durable_writes(), 0, "no flush yet");
    device.flush(IoCause::UserData).expect("flush");
    run_ok(&device, vec![write(2, 1, 3)]);
    assert_eq!(
        handle.durable_writes(),
        2,
        "the write after the flush is not durable"
    );
    handle.set_fault(FaultPlan::FailFlush { nth: 1 });
    assert!(device.flush(IoCause::UserData).is_err());
    assert_eq!(handle.durable_writes(), 2, "a failed flush covers nothing");
}

/// The test-only flush mutations (feature `mutations`, on in workspace test builds
/// through crashtest's dev-dependency): a skipped flush covers nothing, a late one
/// takes effect only after the next write.
#[cfg(feature = "mutations")]
#[test]
fn flush_mutations_skip_or_delay_flushes() {
    use device::recording::FlushMutation;
    let (device, handle) = recording_device(4);
    handle.set_flush_mutation(FlushMutation::Skip(IoCause::Wal));
    run_ok(&device, vec![write(0, 1, 1)]);
    device
        .flush(IoCause::Wal)
        .expect("a skipped flush still succeeds");
    assert_eq!(handle.durable_writes(), 0);
    device.flush(IoCause::UserData).expect("flush");
    assert_eq!(handle.durable_writes(), 1, "other causes flush");

    handle.set_flush_mutation(FlushMutation::Late);
    run_ok(&device, vec![write(1, 1, 2)]);
    device
        .flush(IoCause::UserData)
        .expect("a late flush succeeds at once");
    assert_eq!(handle.durable_writes(), 1, "not yet taken effect");
    run_ok(&device, vec![write(2, 1, 3)]);
    assert_eq!(
        handle.durable_writes(),
        2,
        "after the next write, covering the one before"
    );
    assert_eq!(
        &handle.events()[handle.events().len() - 2..],
        &[Event::Write { id: WriteId(2) }, Event::Flush { covers: 2 }]
    );
    handle.set_flush_mutation(FlushMutation::None);
    device.flush(IoCause::UserData).expect("flush");
    assert_eq!(handle.durable_writes(), 3);
}
