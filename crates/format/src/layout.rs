//! Field tables: the single description of each structure's bytes.
//!
//! Encoders and decoders go through [`Field`] accessors, and the doc test compares the
//! same tables with docs/FORMAT.md, so code and document cannot drift apart.

/// One field of an on-disk structure: name (as in FORMAT.md), byte offset and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub name: &'static str,
    pub offset: usize,
    pub size: usize,
}

impl Field {
    pub const fn at(name: &'static str, offset: usize, size: usize) -> Field {
        Field { name, offset, size }
    }

    /// The field that starts where `prev` ends.
    pub const fn after(prev: Field, name: &'static str, size: usize) -> Field {
        Field {
            name,
            offset: prev.offset + prev.size,
            size,
        }
    }

    pub const fn end(self) -> usize {
        self.offset + self.size
    }

    pub fn bytes<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[self.offset..self.end()]
    }

    pub fn bytes_mut<'a>(&self, buf: &'a mut [u8]) -> &'a mut [u8] {
        &mut buf[self.offset..self.end()]
    }

    pub fn get_u8(&self, buf: &[u8]) -> u8 {
        assert_eq!(self.size, 1, "field {} is not a u8", self.name);
        buf[self.offset]
    }

    pub fn get_u16(&self, buf: &[u8]) -> u16 {
        assert_eq!(self.size, 2, "field {} is not a u16", self.name);
        u16::from_le_bytes(self.bytes(buf).try_into().expect("size checked"))
    }

    pub fn get_u32(&self, buf: &[u8]) -> u32 {
        assert_eq!(self.size, 4, "field {} is not a u32", self.name);
        u32::from_le_bytes(self.bytes(buf).try_into().expect("size checked"))
    }

    pub fn get_u64(&self, buf: &[u8]) -> u64 {
        assert_eq!(self.size, 8, "field {} is not a u64", self.name);
        u64::from_le_bytes(self.bytes(buf).try_into().expect("size checked"))
    }

    pub fn put_u8(&self, buf: &mut [u8], v: u8) {
        assert_eq!(self.size, 1, "field {} is not a u8", self.name);
        buf[self.offset] = v;
    }

    pub fn put_u16(&self, buf: &mut [u8], v: u16) {
        assert_eq!(self.size, 2, "field {} is not a u16", self.name);
        self.bytes_mut(buf).copy_from_slice(&v.to_le_bytes());
    }

    pub fn put_u32(&self, buf: &mut [u8], v: u32) {
        assert_eq!(self.size, 4, "field {} is not a u32", self.name);
        self.bytes_mut(buf).copy_from_slice(&v.to_le_bytes());
    }

    pub fn put_u64(&self, buf: &mut [u8], v: u64) {
        assert_eq!(self.size, 8, "field {} is not a u64", self.name);
        self.bytes_mut(buf).copy_from_slice(&v.to_le_bytes());
    }

    pub fn put_bytes(&self, buf: &mut [u8], v: &[u8]) {
        assert_eq!(
            self.size,
            v.len(),
            "field {} has size {}",
            self.name,
            self.size
        );
        self.bytes_mut(buf).copy_from_slice(v);
    }
}

/// A structure's complete field table, in offset order, covering `size` bytes.
#[derive(Debug, Clone, Copy)]
pub struct StructLayout {
    /// The FORMAT.md heading this table appears under.
    pub name: &'static str,
    pub size: usize,
    pub fields: &'static [Field],
}

impl StructLayout {
    /// Fields are contiguous, start at 0 and end at `size` (reserved space is a field).
    pub fn check_contiguous(&self) -> Result<(), String> {
        let mut at = 0;
        for f in self.fields {
            if f.offset != at {
                return Err(format!(
                    "{}: field {} at {} expected {}",
                    self.name, f.name, f.offset, at
                ));
            }
            at = f.end();
        }
        if at != self.size {
            return Err(format!(
                "{}: fields end at {} but size is {}",
                self.name, at, self.size
            ));
        }
        Ok(())
    }
}

/// Every structure whose table appears in docs/FORMAT.md.
pub fn all_layouts() -> Vec<StructLayout> {
    vec![
        crate::superblock::LAYOUT,
        crate::checkpoint::HEADER_LAYOUT,
        crate::checkpoint::TRAILER_LAYOUT,
        crate::summary::HEADER_LAYOUT,
        crate::summary::ENTRY_LAYOUT,
        crate::pmr::HEADER_LAYOUT,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_layout_is_contiguous() {
        for layout in all_layouts() {
            layout.check_contiguous().unwrap();
        }
    }

    #[test]
    fn round_trips() {
        const A: Field = Field::at("a", 0, 8);
        const B: Field = Field::after(A, "b", 4);
        const C: Field = Field::after(B, "c", 2);
        let mut buf = [0u8; 16];
        A.put_u64(&mut buf, 0x0102_0304_0506_0708);
        B.put_u32(&mut buf, 7);
        C.put_u16(&mut buf, 9);
        assert_eq!(A.get_u64(&buf), 0x0102_0304_0506_0708);
        assert_eq!(B.get_u32(&buf), 7);
        assert_eq!(C.get_u16(&buf), 9);
        assert_eq!(buf[0], 8, "little-endian");
        assert_eq!(C.end(), 14);
    }
}

/// Reading field tables back out of docs/FORMAT.md, so each crate's doc test can hold its
/// structures to the document.
pub mod doc {
    use super::StructLayout;

    /// The rows (cells trimmed, backticks removed) of the table on the lines after the
    /// line `marker`, header and separator skipped. Panics if the marker line is missing.
    pub fn table_after(doc: &str, marker: &str) -> Vec<Vec<String>> {
        let line = format!("\n{marker}\n");
        let start = doc
            .find(&line)
            .unwrap_or_else(|| panic!("FORMAT.md lacks a line {marker}"));
        doc[start + line.len() - 1..]
            .lines()
            .skip(1)
            .take_while(|l| l.starts_with('|'))
            .skip(2)
            .map(|l| {
                l.trim_matches('|')
                    .split('|')
                    .map(|c| c.trim().replace('`', ""))
                    .collect()
            })
            .collect()
    }

    /// The arguments of every marker line `<!-- {kind}: ARG -->`, in document order.
    pub fn markers<'a>(doc: &'a str, kind: &str) -> Vec<&'a str> {
        let line_prefix = format!("\n<!-- {kind}: ");
        doc.match_indices(line_prefix.as_str())
            .map(|(i, _)| {
                let rest = &doc[i + line_prefix.len()..];
                rest[..rest.find(" -->").expect("marker closes")].trim()
            })
            .collect()
    }

    /// Asserts that the `<!-- {kind}: NAME -->` tables of `doc` are exactly `layouts`, in
    /// order, field by field (offset, size, name), each covering its structure's size.
    pub fn assert_layouts_match(doc: &str, kind: &str, layouts: &[StructLayout]) {
        let documented = markers(doc, kind);
        let in_code: Vec<&str> = layouts.iter().map(|l| l.name).collect();
        assert_eq!(documented, in_code, "FORMAT.md {kind} tables vs code");
        for layout in layouts {
            let rows = table_after(doc, &format!("<!-- {kind}: {} -->", layout.name));
            let doc_fields: Vec<(usize, usize, String)> = rows
                .iter()
                .map(|r| {
                    (
                        r[0].parse().expect("offset"),
                        r[1].parse().expect("size"),
                        r[2].clone(),
                    )
                })
                .collect();
            let code_fields: Vec<(usize, usize, String)> = layout
                .fields
                .iter()
                .map(|f| (f.offset, f.size, f.name.to_string()))
                .collect();
            assert_eq!(doc_fields, code_fields, "table {}", layout.name);
            let end = doc_fields.last().map(|(o, s, _)| o + s).unwrap_or(0);
            assert_eq!(end, layout.size, "{} covers its whole size", layout.name);
        }
    }
}
