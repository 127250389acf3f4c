//! Recording, fault-injecting device. (Being written.)
