//! The WAL on a PMR. (Being written.)
