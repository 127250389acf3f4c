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
    bytes: &'a [u8],
    op: u32,
}

impl<'a> Args<'a> {
    fn get<T: Pod>(&mut self) -> Result<T, DecodeError> {
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
        bytes: body,
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
