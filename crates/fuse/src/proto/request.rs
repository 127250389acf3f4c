//! Decoding one request read from /dev/fuse: the header, then the opcode's argument
//! struct and the names or data after it, each bounds-checked. A malformed request is a
//! [`DecodeError`] (the session answers EINVAL when it has a header to answer), never a
//! panic, and decoding allocates nothing: names and data borrow the read buffer.
//!
//! Invariants:
//! - Every slice handed out lies inside the request's own length (`InHeader::len`,
//!   checked against the bytes read), with any extension area (`total_extlen`) cut off.
//! - Names are the bytes before their NUL; a name without one is an error.

use super::abi::{self, opcode, InHeader, Pod};
use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    #[error("request of {0} bytes is shorter than its header")]
    Short(usize),
    #[error("request header says {said} bytes, {got} were read")]
    Length { said: u32, got: usize },
    #[error("opcode {0}: argument truncated")]
    Truncated(u32),
    #[error("opcode {0}: name not NUL-terminated")]
    Name(u32),
}

/// One decoded request.
#[derive(Debug)]
pub struct Request<'a> {
    pub header: InHeader,
    pub op: Op<'a>,
}

/// The operations this server decodes; anything else is `Unknown` (answered ENOSYS).
#[derive(Debug)]
#[non_exhaustive]
pub enum Op<'a> {
    Init(abi::InitIn),
    Destroy,
    Interrupt(abi::InterruptIn),
    Lookup {
        name: &'a [u8],
    },
    Forget(abi::ForgetIn),
    BatchForget(Forgets<'a>),
    GetAttr,
    SetAttr(abi::SetattrIn),
    ReadLink,
    Symlink {
        name: &'a [u8],
        target: &'a [u8],
    },
    Mknod {
        arg: abi::MknodIn,
        name: &'a [u8],
    },
    Mkdir {
        arg: abi::MkdirIn,
        name: &'a [u8],
    },
    Unlink {
        name: &'a [u8],
    },
    Rmdir {
        name: &'a [u8],
    },
    Rename {
        newdir: u64,
        flags: u32,
        name: &'a [u8],
        newname: &'a [u8],
    },
    Link {
        oldnodeid: u64,
        newname: &'a [u8],
    },
    Open(abi::OpenIn),
    Read(abi::ReadIn),
    Write {
        arg: abi::WriteIn,
        data: &'a [u8],
    },
    Statfs,
    Release(abi::ReleaseIn),
    Fsync(abi::FsyncIn),
    SetXattr {
        arg: abi::SetxattrIn,
        name: &'a [u8],
        value: &'a [u8],
    },
    GetXattr {
        size: u32,
        name: &'a [u8],
    },
    ListXattr {
        size: u32,
    },
    RemoveXattr {
        name: &'a [u8],
    },
    Flush(abi::FlushIn),
    OpenDir(abi::OpenIn),
    ReadDir(abi::ReadIn),
    ReadDirPlus(abi::ReadIn),
    ReleaseDir(abi::ReleaseIn),
    FsyncDir(abi::FsyncIn),
    GetLk(abi::LkIn),
    /// SETLK (`sleep` false) or SETLKW.
    SetLk {
        arg: abi::LkIn,
        sleep: bool,
    },
    Access(abi::AccessIn),
    Create {
        arg: abi::CreateIn,
        name: &'a [u8],
    },
    Fallocate(abi::FallocateIn),
    Lseek(abi::LseekIn),
    Syncfs,
    Unknown(u32),
}

impl Op<'_> {
    /// This operation without the request bytes, if none of its arguments borrow
    /// them: a transport that reads requests into the buffer the reply goes out of
    /// (FUSE over io_uring) then builds a READ's data right there.
    pub fn detached(&self) -> Option<Op<'static>> {
        Some(match self {
            Op::Init(a) => Op::Init(*a),
            Op::Destroy => Op::Destroy,
            Op::Interrupt(a) => Op::Interrupt(*a),
            Op::Forget(a) => Op::Forget(*a),
            Op::GetAttr => Op::GetAttr,
            Op::SetAttr(a) => Op::SetAttr(*a),
            Op::ReadLink => Op::ReadLink,
            Op::Open(a) => Op::Open(*a),
            Op::Read(a) => Op::Read(*a),
            Op::Statfs => Op::Statfs,
            Op::Release(a) => Op::Release(*a),
            Op::Fsync(a) => Op::Fsync(*a),
            Op::ListXattr { size } => Op::ListXattr { size: *size },
            Op::Flush(a) => Op::Flush(*a),
            Op::OpenDir(a) => Op::OpenDir(*a),
            Op::ReadDir(a) => Op::ReadDir(*a),
            Op::ReadDirPlus(a) => Op::ReadDirPlus(*a),
            Op::ReleaseDir(a) => Op::ReleaseDir(*a),
            Op::FsyncDir(a) => Op::FsyncDir(*a),
            Op::GetLk(a) => Op::GetLk(*a),
            Op::SetLk { arg, sleep } => Op::SetLk {
                arg: *arg,
                sleep: *sleep,
            },
            Op::Access(a) => Op::Access(*a),
            Op::Fallocate(a) => Op::Fallocate(*a),
            Op::Lseek(a) => Op::Lseek(*a),
            Op::Syncfs => Op::Syncfs,
            Op::Unknown(code) => Op::Unknown(*code),
            Op::Lookup { .. }
            | Op::BatchForget(_)
            | Op::Symlink { .. }
            | Op::Mknod { .. }
            | Op::Mkdir { .. }
            | Op::Unlink { .. }
            | Op::Rmdir { .. }
            | Op::Rename { .. }
            | Op::Link { .. }
            | Op::Write { .. }
            | Op::SetXattr { .. }
            | Op::GetXattr { .. }
            | Op::RemoveXattr { .. }
            | Op::Create { .. } => return None,
        })
    }
}

/// The nodes of a BATCH_FORGET, read one at a time from the request bytes.
#[derive(Debug, Clone)]
pub struct Forgets<'a> {
    bytes: &'a [u8],
}

impl Iterator for Forgets<'_> {
    type Item = abi::ForgetOne;
    fn next(&mut self) -> Option<abi::ForgetOne> {
        let one = abi::read::<abi::ForgetOne>(self.bytes)?;
        self.bytes = &self.bytes[std::mem::size_of::<abi::ForgetOne>()..];
        Some(one)
    }
}

/// A cursor over a request's argument bytes.
struct Args<'a> {
    /// The opcode's argument struct, where it comes apart from the rest (FUSE over
    /// io_uring puts it in the entry's header area); `None` once read, or when it is
    /// the head of `bytes` (/dev/fuse).
    fixed: Option<&'a [u8]>,
    bytes: &'a [u8],
    op: u32,
}

impl<'a> Args<'a> {
    fn get<T: Pod>(&mut self) -> Result<T, DecodeError> {
        if let Some(fixed) = self.fixed.take() {
            return abi::read::<T>(fixed).ok_or(DecodeError::Truncated(self.op));
        }
        let v = abi::read::<T>(self.bytes).ok_or(DecodeError::Truncated(self.op))?;
        self.bytes = &self.bytes[std::mem::size_of::<T>()..];
        Ok(v)
    }

    fn name(&mut self) -> Result<&'a [u8], DecodeError> {
        let end = self
            .bytes
            .iter()
            .position(|&b| b == 0)
            .ok_or(DecodeError::Name(self.op))?;
        let (name, rest) = self.bytes.split_at(end);
        self.bytes = &rest[1..];
        Ok(name)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.bytes.len() < n {
            return Err(DecodeError::Truncated(self.op));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }
}

/// The header of `buf` (the bytes one read returned), checked against its length.
pub fn header(buf: &[u8]) -> Result<InHeader, DecodeError> {
    let h = abi::read::<InHeader>(buf).ok_or(DecodeError::Short(buf.len()))?;
    if h.len as usize != buf.len() || (h.len as usize) < std::mem::size_of::<InHeader>() {
        return Err(DecodeError::Length {
            said: h.len,
            got: buf.len(),
        });
    }
    Ok(h)
}

/// Decodes the request in `buf`.
pub fn decode(buf: &[u8]) -> Result<Request<'_>, DecodeError> {
    let header = header(buf)?;
    let ext = usize::from(header.total_extlen) * 8;
    let body = &buf[std::mem::size_of::<InHeader>()..];
    let body = &body[..body
        .len()
        .checked_sub(ext)
        .ok_or(DecodeError::Truncated(header.opcode))?];
    let mut a = Args {
        fixed: None,
        bytes: body,
        op: header.opcode,
    };
    let op = decode_op(header.opcode, &mut a)?;
    Ok(Request { header, op })
}

/// Decodes a request that came through a FUSE-over-io_uring entry: the header
/// (`in_out`, its first 40 bytes), the opcode's argument struct (`op_in`, up to
/// [`abi::URING_OP_IN_OUT_BYTES`]) and the rest of the arguments (`payload`, the bytes
/// the entry says were copied). The header's length counts all three; the argument
/// struct's length is what is left of it.
pub fn decode_ring<'a>(
    in_out: &[u8],
    op_in: &'a [u8],
    payload: &'a [u8],
) -> Result<Request<'a>, DecodeError> {
    let header = abi::read::<InHeader>(in_out).ok_or(DecodeError::Short(in_out.len()))?;
    let head = std::mem::size_of::<InHeader>();
    let fixed_len = (header.len as usize)
        .checked_sub(head + payload.len())
        .filter(|&n| n <= op_in.len())
        .ok_or(DecodeError::Length {
            said: header.len,
            got: head + payload.len(),
        })?;
    let ext = usize::from(header.total_extlen) * 8;
    let payload = &payload[..payload
        .len()
        .checked_sub(ext)
        .ok_or(DecodeError::Truncated(header.opcode))?];
    let mut a = Args {
        fixed: Some(&op_in[..fixed_len]),
        bytes: payload,
        op: header.opcode,
    };
    let op = decode_op(header.opcode, &mut a)?;
    Ok(Request { header, op })
}

fn decode_op<'a>(code: u32, a: &mut Args<'a>) -> Result<Op<'a>, DecodeError> {
    Ok(match code {
        opcode::INIT => Op::Init(init_in(a)?),
        opcode::DESTROY => Op::Destroy,
        opcode::INTERRUPT => Op::Interrupt(a.get()?),
        opcode::LOOKUP => Op::Lookup { name: a.name()? },
        opcode::FORGET => Op::Forget(a.get()?),
        opcode::BATCH_FORGET => {
            let n: abi::BatchForgetIn = a.get()?;
            let len = (n.count as usize)
                .checked_mul(std::mem::size_of::<abi::ForgetOne>())
                .ok_or(DecodeError::Truncated(code))?;
            Op::BatchForget(Forgets {
                bytes: a.take(len)?,
            })
        }
        opcode::GETATTR => Op::GetAttr,
        opcode::SETATTR => Op::SetAttr(a.get()?),
        opcode::READLINK => Op::ReadLink,
        opcode::SYMLINK => Op::Symlink {
            name: a.name()?,
            target: a.name()?,
        },
        opcode::MKNOD => Op::Mknod {
            arg: a.get()?,
            name: a.name()?,
        },
        opcode::MKDIR => Op::Mkdir {
            arg: a.get()?,
            name: a.name()?,
        },
        opcode::UNLINK => Op::Unlink { name: a.name()? },
        opcode::RMDIR => Op::Rmdir { name: a.name()? },
        opcode::RENAME => {
            let r: abi::RenameIn = a.get()?;
            Op::Rename {
                newdir: r.newdir,
                flags: 0,
                name: a.name()?,
                newname: a.name()?,
            }
        }
        opcode::RENAME2 => {
            let r: abi::Rename2In = a.get()?;
            Op::Rename {
                newdir: r.newdir,
                flags: r.flags,
                name: a.name()?,
                newname: a.name()?,
            }
        }
        opcode::LINK => {
            let l: abi::LinkIn = a.get()?;
            Op::Link {
                oldnodeid: l.oldnodeid,
                newname: a.name()?,
            }
        }
        _ => return decode_file_op(code, a),
    })
}

fn decode_file_op<'a>(code: u32, a: &mut Args<'a>) -> Result<Op<'a>, DecodeError> {
    Ok(match code {
        opcode::OPEN => Op::Open(a.get()?),
        opcode::READ => Op::Read(a.get()?),
        opcode::WRITE => {
            let arg: abi::WriteIn = a.get()?;
            Op::Write {
                arg,
                data: a.take(arg.size as usize)?,
            }
        }
        opcode::STATFS => Op::Statfs,
        opcode::RELEASE => Op::Release(a.get()?),
        opcode::FSYNC => Op::Fsync(a.get()?),
        opcode::SETXATTR => {
            let arg: abi::SetxattrIn = a.get()?;
            let name = a.name()?;
            Op::SetXattr {
                arg,
                name,
                value: a.take(arg.size as usize)?,
            }
        }
        opcode::GETXATTR => {
            let g: abi::GetxattrIn = a.get()?;
            Op::GetXattr {
                size: g.size,
                name: a.name()?,
            }
        }
        opcode::LISTXATTR => Op::ListXattr {
            size: a.get::<abi::GetxattrIn>()?.size,
        },
        opcode::REMOVEXATTR => Op::RemoveXattr { name: a.name()? },
        opcode::FLUSH => Op::Flush(a.get()?),
        opcode::OPENDIR => Op::OpenDir(a.get()?),
        opcode::READDIR => Op::ReadDir(a.get()?),
        opcode::READDIRPLUS => Op::ReadDirPlus(a.get()?),
        opcode::RELEASEDIR => Op::ReleaseDir(a.get()?),
        opcode::FSYNCDIR => Op::FsyncDir(a.get()?),
        opcode::GETLK => Op::GetLk(a.get()?),
        opcode::SETLK | opcode::SETLKW => Op::SetLk {
            arg: a.get()?,
            sleep: code == opcode::SETLKW,
        },
        opcode::ACCESS => Op::Access(a.get()?),
        opcode::CREATE => Op::Create {
            arg: a.get()?,
            name: a.name()?,
        },
        opcode::FALLOCATE => Op::Fallocate(a.get()?),
        opcode::LSEEK => Op::Lseek(a.get()?),
        opcode::SYNCFS => Op::Syncfs,
        other => Op::Unknown(other),
    })
}

/// INIT: the full 64 bytes from 7.36 on, the first 16 from older kernels.
fn init_in(a: &mut Args<'_>) -> Result<abi::InitIn, DecodeError> {
    if let Ok(full) = a.get::<abi::InitIn>() {
        return Ok(full);
    }
    let old = a.take(16)?;
    let word = |i: usize| u32::from_ne_bytes(old[i * 4..i * 4 + 4].try_into().expect("4 bytes"));
    Ok(abi::InitIn {
        major: word(0),
        minor: word(1),
        max_readahead: word(2),
        flags: word(3),
        ..abi::InitIn::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::abi::bytes_of;

    fn request(op: u32, body: &[u8]) -> Vec<u8> {
        let h = InHeader {
            len: (40 + body.len()) as u32,
            opcode: op,
            unique: 9,
            nodeid: 1,
            ..InHeader::default()
        };
        let mut v = bytes_of(&h).to_vec();
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn names_and_data_are_cut_at_their_bounds() {
        let r = request(opcode::SYMLINK, b"link\0/target\0");
        match decode(&r).expect("valid").op {
            Op::Symlink { name, target } => {
                assert_eq!((name, target), (&b"link"[..], &b"/target"[..]))
            }
            op => panic!("{op:?}"),
        }
        let w = abi::WriteIn {
            size: 3,
            ..abi::WriteIn::default()
        };
        let mut body = bytes_of(&w).to_vec();
        body.extend_from_slice(b"abc");
        match decode(&request(opcode::WRITE, &body)).expect("valid").op {
            Op::Write { data, .. } => assert_eq!(data, b"abc"),
            op => panic!("{op:?}"),
        }
    }

    #[test]
    fn malformed_requests_are_errors_not_panics() {
        assert_eq!(decode(&[0u8; 10]).unwrap_err(), DecodeError::Short(10));
        let mut r = request(opcode::LOOKUP, b"x\0");
        r[0] = 200; // the header claims more than was read
        assert!(matches!(decode(&r), Err(DecodeError::Length { .. })));
        assert_eq!(
            decode(&request(opcode::LOOKUP, b"no-nul")).unwrap_err(),
            DecodeError::Name(opcode::LOOKUP)
        );
        let w = abi::WriteIn {
            size: 100,
            ..abi::WriteIn::default()
        };
        assert_eq!(
            decode(&request(opcode::WRITE, bytes_of(&w))).unwrap_err(),
            DecodeError::Truncated(opcode::WRITE)
        );
        let f = abi::BatchForgetIn {
            count: u32::MAX,
            dummy: 0,
        };
        assert!(decode(&request(opcode::BATCH_FORGET, bytes_of(&f))).is_err());
        assert!(decode(&request(opcode::SETATTR, &[0; 8])).is_err());
        // Every opcode with every short body: an error or a value, never a panic.
        for op in 0..64 {
            for len in 0..100 {
                let _ = decode(&request(op, &vec![0xff; len]));
            }
        }
    }

    #[test]
    fn ring_requests_take_their_struct_apart_from_the_rest() {
        let w = abi::WriteIn {
            offset: 4096,
            size: 3,
            ..abi::WriteIn::default()
        };
        let h = InHeader {
            len: 40 + 40 + 3,
            opcode: opcode::WRITE,
            unique: 8,
            ..InHeader::default()
        };
        let mut op_in = [0u8; 128];
        op_in[..40].copy_from_slice(bytes_of(&w));
        let r = decode_ring(bytes_of(&h), &op_in, b"abc").expect("valid");
        match r.op {
            Op::Write { arg, data } => assert_eq!((arg.offset, data), (4096, &b"abc"[..])),
            op => panic!("{op:?}"),
        }
        // A LOOKUP: no struct, the name in the payload.
        let h = InHeader {
            len: 40 + 2,
            opcode: opcode::LOOKUP,
            ..InHeader::default()
        };
        match decode_ring(bytes_of(&h), &op_in, b"x\0").expect("valid").op {
            Op::Lookup { name } => assert_eq!(name, b"x"),
            op => panic!("{op:?}"),
        }
        // A struct shorter than the opcode's, or a length that does not add up.
        let h = InHeader {
            len: 40 + 8,
            opcode: opcode::WRITE,
            ..InHeader::default()
        };
        assert_eq!(
            decode_ring(bytes_of(&h), &op_in, b"").unwrap_err(),
            DecodeError::Truncated(opcode::WRITE)
        );
        let h = InHeader {
            len: 40 + 200,
            opcode: opcode::GETATTR,
            ..InHeader::default()
        };
        assert!(matches!(
            decode_ring(bytes_of(&h), &op_in, b""),
            Err(DecodeError::Length { .. })
        ));
        assert!(decode_ring(&[0u8; 10], &op_in, b"").is_err());
    }

    #[test]
    fn batch_forget_yields_each_node() {
        let mut body = bytes_of(&abi::BatchForgetIn { count: 2, dummy: 0 }).to_vec();
        for n in [5u64, 6] {
            body.extend_from_slice(bytes_of(&abi::ForgetOne {
                nodeid: n,
                nlookup: n * 10,
            }));
        }
        match decode(&request(opcode::BATCH_FORGET, &body))
            .expect("valid")
            .op
        {
            Op::BatchForget(f) => {
                let v: Vec<_> = f.map(|o| (o.nodeid, o.nlookup)).collect();
                assert_eq!(v, vec![(5, 50), (6, 60)]);
            }
            op => panic!("{op:?}"),
        }
    }
}
