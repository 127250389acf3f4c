//! Opening files and block devices for direct IO. (Being written.)
