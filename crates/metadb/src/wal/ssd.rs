//! The WAL on the device. (Being written.)
