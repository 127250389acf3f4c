//! IO requests and completions. A request owns its buffer while the device works on it.

use crate::buf::AlignedBuf;
use crate::error::DeviceError;
use platform::IoCause;

/// One operation.
#[derive(Debug)]
pub enum IoOp {
    /// Fill `buf` from `offset`.
    Read { offset: u64, buf: AlignedBuf },
    /// Write all of `buf` at `offset`.
    Write { offset: u64, buf: AlignedBuf },
    /// Make every write that completed before this was submitted durable.
    Flush,
    /// The range's contents become unspecified; the device may reclaim it.
    Discard { offset: u64, len: u64 },
}

impl IoOp {
    pub fn name(&self) -> &'static str {
        match self {
            IoOp::Read { .. } => "read",
            IoOp::Write { .. } => "write",
            IoOp::Flush => "flush",
            IoOp::Discard { .. } => "discard",
        }
    }

    /// (offset, length) for ops that touch a range.
    pub fn range(&self) -> Option<(u64, u64)> {
        match self {
            IoOp::Read { offset, buf } | IoOp::Write { offset, buf } => {
                Some((*offset, buf.len() as u64))
            }
            IoOp::Discard { offset, len } => Some((*offset, *len)),
            IoOp::Flush => None,
        }
    }
}

/// An operation, why it happens, and a caller-chosen tag that its completion carries.
#[derive(Debug)]
pub struct IoRequest {
    pub op: IoOp,
    pub cause: IoCause,
    pub tag: u64,
}

impl IoRequest {
    pub fn read(offset: u64, buf: AlignedBuf, cause: IoCause) -> IoRequest {
        IoRequest {
            op: IoOp::Read { offset, buf },
            cause,
            tag: 0,
        }
    }

    pub fn write(offset: u64, buf: AlignedBuf, cause: IoCause) -> IoRequest {
        IoRequest {
            op: IoOp::Write { offset, buf },
            cause,
            tag: 0,
        }
    }

    pub fn flush(cause: IoCause) -> IoRequest {
        IoRequest {
            op: IoOp::Flush,
            cause,
            tag: 0,
        }
    }

    pub fn discard(offset: u64, len: u64, cause: IoCause) -> IoRequest {
        IoRequest {
            op: IoOp::Discard { offset, len },
            cause,
            tag: 0,
        }
    }

    pub fn with_tag(mut self, tag: u64) -> IoRequest {
        self.tag = tag;
        self
    }

    /// The buffer back, for reads and writes.
    pub fn into_buf(self) -> Option<AlignedBuf> {
        match self.op {
            IoOp::Read { buf, .. } | IoOp::Write { buf, .. } => Some(buf),
            IoOp::Flush | IoOp::Discard { .. } => None,
        }
    }
}

/// A finished request: the request (with its buffer) and how it ended.
#[derive(Debug)]
pub struct IoCompletion {
    pub request: IoRequest,
    pub result: Result<(), DeviceError>,
}
