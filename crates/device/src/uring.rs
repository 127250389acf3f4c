//! io_uring backend. (Being written.)
