//! CRC-32C (Castagnoli), hardware accelerated where the CPU has SSE 4.2.
//!
//! Structures store the CRC of their bytes with the checksum field itself excluded
//! (see each structure's table in docs/FORMAT.md).

/// CRC-32C of `bytes`.
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

/// CRC-32C of `bytes` continued from the CRC `crc` of what came before them.
pub fn crc32c_append(crc: u32, bytes: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, bytes)
}

/// CRC-32C of `bytes` with the 4-byte field at `skip_offset` treated as absent.
pub fn crc32c_skipping(bytes: &[u8], skip_offset: usize) -> u32 {
    assert!(skip_offset + 4 <= bytes.len());
    let head = crc32c::crc32c(&bytes[..skip_offset]);
    crc32c::crc32c_append(head, &bytes[skip_offset + 4..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vector() {
        // RFC 3720 B.4: 32 bytes of zeros.
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
    }

    #[test]
    fn skipping_equals_concatenation() {
        let bytes: Vec<u8> = (0..100u8).collect();
        let mut joined = bytes[..40].to_vec();
        joined.extend_from_slice(&bytes[44..]);
        assert_eq!(crc32c_skipping(&bytes, 40), crc32c(&joined));
    }
}
