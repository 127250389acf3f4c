//! Unit tests of the page cache (`crate::pagecache`).

use super::*;

fn pages() -> Pages {
    Pages::new(Arc::new(Cache::new(CacheConfig::default())))
}

#[test]
fn dirty_runs_split_at_gaps_and_the_limit() {
    let mut p = pages();
    for b in [3, 4, 5, 9, 10, 11, 12] {
        p.install(b, Block::from(&vec![b as u8; PAGE][..]), None);
    }
    p.insert_clean(6, Block::from(&[0; PAGE][..]), Some(true));
    assert_eq!(p.dirty_runs(3), vec![(3, 3), (9, 3), (12, 1)]);
    assert_eq!(p.blocks(9, 2)[1][0], 10);
    let sent = p.blocks(3, 3);
    // Block 4 is rewritten while its old bytes are being written back.
    p.install(4, Block::from(&vec![44; PAGE][..]), None);
    for (i, data) in sent.iter().enumerate() {
        p.written(3 + i as u64, data);
    }
    assert_eq!(p.dirty_count(), 5);
    assert_eq!(
        p.get(4).map(|pg| (pg.dirty, pg.mapped)),
        Some((true, Some(true)))
    );
    assert_eq!(p.cache.stats().dirty, 5);
    assert_eq!(p.cache.stats().pages, 8);
}

#[test]
fn room_claims_count_until_their_pages_are_dirty() {
    let cache = Arc::new(Cache::new(CacheConfig::default()));
    let epoch = cache.room_epoch();
    assert!(cache.set_room(epoch, 4 * PAGE as u64));
    let a = cache.claim_room(2 * PAGE as u64).expect("fits");
    let b = cache.claim_room(2 * PAGE as u64).expect("fits");
    assert!(cache.claim_room(1).is_none(), "claims add up");
    drop(b);
    let mut p = Pages::new(cache.clone());
    p.install(0, Block::from(&vec![1; PAGE][..]), None);
    p.install(1, Block::from(&vec![1; PAGE][..]), None);
    drop(a);
    // The claim's bytes are dirty pages now.
    assert!(cache.claim_room(3 * PAGE as u64).is_none());
    let c = cache.claim_room(2 * PAGE as u64).expect("fits");
    drop(c);
}

#[test]
fn a_room_look_up_a_write_back_overtook_is_not_stored() {
    let cache = Cache::new(CacheConfig::default());
    let epoch = cache.room_epoch();
    assert!(cache.set_room(epoch, 8 * PAGE as u64));
    let looking = cache.room_epoch();
    // A write-back takes room while the look-up reads the engine's figures.
    cache.take_room(8 * PAGE as u64);
    assert!(!cache.set_room(looking, 8 * PAGE as u64));
    assert!(cache.claim_room(1).is_none(), "the room stays taken");
    assert!(cache.set_room(cache.room_epoch(), PAGE as u64));
    assert!(cache.claim_room(PAGE as u64).is_some());
}

#[test]
fn fetches_go_stale_on_install_and_clear() {
    let mut p = pages();
    let a = p.begin_fetch(0, 3);
    let b = p.begin_fetch(10, 12);
    p.install(2, Block::from(&vec![1; PAGE][..]), None);
    assert!(!p.end_fetch(a));
    assert!(p.end_fetch(b));
    let c = p.begin_fetch(5, 5);
    p.clear();
    assert!(!p.end_fetch(c));
}

#[test]
fn counters_follow_clear_evict_and_drop() {
    let cache = Arc::new(Cache::new(CacheConfig::default()));
    let mut p = Pages::new(cache.clone());
    for b in 0..10 {
        p.insert_clean(b, Block::from(&[0; PAGE][..]), Some(false));
    }
    p.install(20, Block::from(&vec![0; PAGE][..]), Some(false));
    assert_eq!(p.pending_blocks(), 1);
    assert_eq!(p.evict_clean(4, 0), 4);
    // The farthest from block 0 went first.
    assert!(p.get(9).is_none() && p.get(0).is_some());
    assert_eq!(cache.stats().pages, 7);
    drop(p);
    assert_eq!((cache.stats().pages, cache.stats().dirty), (0, 0));
}

#[test]
fn pages_across_groups_keep_their_states_and_tallies() {
    let cache = Arc::new(Cache::new(CacheConfig::default()));
    let mut p = Pages::new(cache.clone());
    let block = |x: u8| Block::from(&vec![x; PAGE][..]);
    // Out of order, across the boundaries of groups 0, 1 and 2.
    for b in [130, 63, 64, 0, 65, 127, 128] {
        p.install(b, block(b as u8), None);
    }
    p.insert_clean(62, block(62), Some(true));
    p.insert_clean(129, block(129), Some(false));
    assert!(
        !p.insert_clean(64, block(0), Some(true)),
        "a cached page is newer"
    );
    assert_eq!(p.unknown_dirty(), vec![0, 63, 64, 65, 127, 128, 130]);
    p.learn_mapped(64, false);
    p.learn_mapped(65, true);
    p.learn_mapped(62, false);
    assert_eq!(
        p.get(62).map(|pg| pg.mapped),
        Some(Some(true)),
        "known stays"
    );
    assert_eq!((p.unknown_dirty().len(), p.pending_blocks()), (5, 1));
    assert_eq!(p.dirty_runs(64), vec![(0, 1), (63, 3), (127, 2), (130, 1)]);
    let got = p.cached(61, 6);
    let firsts: Vec<Option<u8>> = got.iter().map(|b| b.as_ref().map(|b| b[0])).collect();
    assert_eq!(
        firsts,
        vec![None, Some(62), Some(63), Some(64), Some(65), None]
    );
    // A rewrite keeps what the page knew; a write-back of the old bytes leaves it dirty.
    let old = p.blocks(64, 1);
    p.install(64, block(99), Some(true));
    assert_eq!(
        p.get(64).map(|pg| (pg.dirty, pg.mapped)),
        Some((true, Some(false)))
    );
    p.written(64, &old[0]);
    assert!(p.get(64).is_some_and(|pg| pg.dirty && pg.data[0] == 99));
    let new = p.blocks(64, 1);
    p.written(64, &new[0]);
    assert_eq!(
        p.get(64).map(|pg| (pg.dirty, pg.mapped)),
        Some((false, Some(true)))
    );
    assert_eq!((p.dirty_count(), p.pending_blocks()), (6, 0));
    // A range over parts of three groups, then the rest.
    p.drop_range(63, 129);
    assert_eq!(p.dirty_runs(64), vec![(0, 1), (130, 1)]);
    assert_eq!((cache.stats().pages, cache.stats().dirty), (4, 2));
    assert_eq!(p.evict_clean(10, 0), 2);
    assert_eq!((cache.stats().pages, cache.stats().dirty), (2, 2));
    p.drop_range(0, u64::MAX);
    assert_eq!((cache.stats().pages, cache.stats().dirty), (0, 0));
    assert!(p.unknown_dirty().is_empty() && p.dirty_runs(1).is_empty());
}

#[test]
fn a_dropped_range_takes_only_its_pages_dirty_or_clean() {
    let cache = Arc::new(Cache::new(CacheConfig::default()));
    let mut p = Pages::new(cache.clone());
    for b in 0..6 {
        p.insert_clean(b, Block::from(&[0; PAGE][..]), Some(true));
    }
    p.install(7, Block::from(&vec![1; PAGE][..]), Some(false));
    p.install(8, Block::from(&vec![1; PAGE][..]), None);
    p.durable_size = Some(0);
    let inside = p.begin_fetch(4, 4);
    let outside = p.begin_fetch(1, 2);
    p.drop_range(4, 8);
    assert!(p.get(3).is_some() && p.get(4).is_none() && p.get(7).is_none());
    assert!(!p.end_fetch(inside) && p.end_fetch(outside));
    assert_eq!((p.dirty_count(), p.pending_blocks()), (1, 0));
    assert_eq!(p.unknown_dirty(), vec![8]);
    assert_eq!((cache.stats().pages, cache.stats().dirty), (5, 1));
    p.drop_range(0, u64::MAX);
    assert_eq!((cache.stats().pages, cache.stats().dirty), (0, 0));
    assert_eq!((p.durable_size, p.dirty_since), (None, None));
}

#[test]
fn a_clean_range_goes_and_dirty_pages_in_it_stay() {
    let cache = Arc::new(Cache::new(CacheConfig::default()));
    let mut p = Pages::new(cache.clone());
    // Three groups' worth, a dirty page inside the range and one past it.
    for b in 0..200 {
        p.insert_clean(b, Block::from(&[1; PAGE][..]), Some(true));
    }
    p.install(70, Block::from(&[2; PAGE][..]), None);
    p.install(150, Block::from(&[2; PAGE][..]), None);
    assert_eq!(p.evict_clean_range(10, 140), 129, "130 blocks, one dirty");
    assert!(p.get(9).is_some() && p.get(10).is_none() && p.get(139).is_none());
    assert!(p.get(140).is_some());
    assert_eq!(p.get(70).map(|pg| pg.dirty), Some(true));
    assert_eq!(p.dirty_count(), 2);
    let stats = cache.stats();
    assert_eq!((stats.pages, stats.dirty, stats.evicted), (71, 2, 129));
    // Nothing there, or an empty range: nothing goes.
    assert_eq!(p.evict_clean_range(10, 60), 0);
    assert_eq!(p.evict_clean_range(150, 150), 0);
    assert_eq!(p.evict_clean_range(1000, 5000), 0);
}
