//! pread/pwrite backend. (Being written.)
