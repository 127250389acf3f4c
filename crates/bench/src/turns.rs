//! The order in which compared systems take their turns within one run of a figure.
//!
//! Invariant: over consecutive runs each system goes first in turn, so drift of a noisy
//! machine (an SSD's cache filling, a host writing back) hits them alike.

/// `items` rotated left by `run`: run 0 keeps the given order.
pub fn turn_order<T: Clone>(items: &[T], run: u32) -> Vec<T> {
    let mut order = items.to_vec();
    let n = order.len().max(1);
    order.rotate_left(run as usize % n);
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_goes_first_in_turn() {
        let all = ["a", "b", "c"];
        assert_eq!(turn_order(&all, 0), all);
        assert_eq!(turn_order(&all, 1), ["b", "c", "a"]);
        assert_eq!(turn_order(&all, 2)[0], "c");
        assert_eq!(turn_order(&all, 3), all);
        assert!(turn_order::<u32>(&[], 1).is_empty());
    }
}
