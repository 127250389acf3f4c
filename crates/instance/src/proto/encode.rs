//! Encoding requests into frames: the inverse of `Request::decode`, field for field.

use super::*;

impl Request<'_> {
    /// [`Request::encode`] of the path forms of Create, Remove and Rename.
    fn encode_paths<'w>(&self, w: &'w mut Writer) -> &'w mut Writer {
        match *self {
            Request::CreateAt {
                start,
                kind,
                perm,
                path,
                target,
            } => w
                .u8(op::CREATE_AT)
                .u64(start.0)
                .u8(kind_code(kind))
                .u32(perm)
                .bytes(path)
                .opt_bytes(target),
            Request::RemoveAt { start, dir, path } => {
                w.u8(op::REMOVE_AT).u64(start.0).u8(dir.into()).bytes(path)
            }
            Request::RenameAt {
                from,
                from_path,
                to,
                to_path,
                mode,
            } => w
                .u8(op::RENAME_AT)
                .u64(from.0)
                .bytes(from_path)
                .u64(to.0)
                .bytes(to_path)
                .u8(rename_code(mode)),
            _ => w,
        }
    }

    /// Encodes the request into `w`, except a write's data (`data()`), which the
    /// caller sends from its own buffer right after the frame.
    pub fn encode(&self, w: &mut Writer) {
        match *self {
            Request::Hello { token, version } => w.u8(op::HELLO).u64(token).u32(version),
            Request::Resolve {
                start,
                follow,
                path,
            } => w.u8(op::RESOLVE).u64(start.0).u8(follow.into()).bytes(path),
            Request::ResolveParent { start, path } => {
                w.u8(op::RESOLVE_PARENT).u64(start.0).bytes(path)
            }
            Request::Lookup { dir, name } => w.u8(op::LOOKUP).u64(dir.0).bytes(name),
            Request::Stat { ino } => w.u8(op::STAT).u64(ino.0),
            Request::Tables => w.u8(op::TABLES),
            Request::Mailbox { writable } => w.u8(op::MAILBOX).u8(u8::from(writable)),
            Request::CloseQuiet { handle } => w.u8(op::CLOSE_QUIET).u64(handle),
            Request::Posts {
                token,
                version,
                sent,
                ring,
            } => w
                .u8(op::POSTS)
                .u64(token)
                .u32(version)
                .u64(sent)
                .u8(ring.into()),
            Request::Barrier { count } => w.u8(op::BARRIER).u64(count),
            Request::StatAt {
                start,
                follow,
                path,
            } => w.u8(op::STAT_AT).u64(start.0).u8(follow.into()).bytes(path),
            Request::Access { ino, mask } => w.u8(op::ACCESS).u64(ino.0).u32(mask),
            Request::Open {
                start,
                flags,
                mode,
                prefetch,
                path,
            } => {
                w.u8(op::OPEN).u64(start.0).i32(flags);
                w.u32(mode).u32(prefetch).bytes(path)
            }
            Request::Close { handle } => w.u8(op::CLOSE).u64(handle),
            Request::Create {
                parent,
                kind,
                perm,
                name,
                target,
            } => w
                .u8(op::CREATE)
                .u64(parent.0)
                .u8(kind_code(kind))
                .u32(perm)
                .bytes(name)
                .opt_bytes(target),
            Request::Mknod {
                parent,
                kind,
                perm,
                dev,
                name,
            } => w
                .u8(op::MKNOD)
                .u64(parent.0)
                .u8(kind_code(kind))
                .u32(perm)
                .u64(dev)
                .bytes(name),
            Request::Remove { parent, dir, name } => {
                w.u8(op::REMOVE).u64(parent.0).u8(dir.into()).bytes(name)
            }
            Request::CreateAt { .. } | Request::RemoveAt { .. } | Request::RenameAt { .. } => {
                self.encode_paths(w)
            }
            Request::Rename {
                from,
                from_name,
                to,
                to_name,
                mode,
            } => w
                .u8(op::RENAME)
                .u64(from.0)
                .bytes(from_name)
                .u64(to.0)
                .bytes(to_name)
                .u8(rename_code(mode)),
            Request::Link { ino, parent, name } => {
                w.u8(op::LINK).u64(ino.0).u64(parent.0).bytes(name)
            }
            Request::Readlink { ino } => w.u8(op::READLINK).u64(ino.0),
            _ => {
                self.encode_attrs(w);
                w
            }
        };
    }

    /// [`Request::encode`] of attribute, directory and data calls.
    fn encode_attrs(&self, w: &mut Writer) {
        match *self {
            Request::SetAttr { ino, ref changes } => {
                w.u8(op::SET_ATTR).u64(ino.0);
                put_opt_u32(w, changes.perm);
                put_opt_u32(w, changes.uid);
                put_opt_u32(w, changes.gid);
                put_time(w, changes.atime);
                put_time(w, changes.mtime);
                w
            }
            Request::TruncateIno { ino, size } => w.u8(op::TRUNCATE_INO).u64(ino.0).u64(size),
            Request::SetXattr {
                ino,
                mode,
                name,
                value,
            } => w
                .u8(op::SET_XATTR)
                .u64(ino.0)
                .u8(xattr_code(mode))
                .bytes(name)
                .bytes(value),
            Request::GetXattr { ino, name } => w.u8(op::GET_XATTR).u64(ino.0).bytes(name),
            Request::ListXattr { ino } => w.u8(op::LIST_XATTR).u64(ino.0),
            Request::RemoveXattr { ino, name } => w.u8(op::REMOVE_XATTR).u64(ino.0).bytes(name),
            Request::Readdir { dir, max, after } => {
                w.u8(op::READDIR).u64(dir.0).u32(max).opt_bytes(after)
            }
            Request::Statfs => w.u8(op::STATFS),
            _ => {
                self.encode_data(w);
                w
            }
        };
    }

    /// [`Request::encode`] of the calls that name a handle (and Sync).
    fn encode_data(&self, w: &mut Writer) {
        match *self {
            Request::Read {
                handle,
                offset,
                len,
            } => w.u8(op::READ).u64(handle).u64(offset).u32(len),
            Request::Write {
                handle,
                offset,
                data,
            } => w.u8(op::WRITE).u64(handle).u64(offset).u32(data_len(data)),
            Request::Append { handle, data } => w.u8(op::APPEND).u64(handle).u32(data_len(data)),
            Request::Truncate { handle, size } => w.u8(op::TRUNCATE).u64(handle).u64(size),
            Request::Fallocate {
                handle,
                mode,
                offset,
                len,
            } => w
                .u8(op::FALLOCATE)
                .u64(handle)
                .i32(mode)
                .u64(offset)
                .u64(len),
            Request::SeekData { handle, offset } => w.u8(op::SEEK_DATA).u64(handle).u64(offset),
            Request::SeekHole { handle, offset } => w.u8(op::SEEK_HOLE).u64(handle).u64(offset),
            Request::Fsync { handle, data_only } => {
                w.u8(op::FSYNC).u64(handle).u8(data_only.into())
            }
            Request::Sync => w.u8(op::SYNC),
            Request::LockSet {
                handle,
                space,
                start,
                end,
                kind,
                description,
                wait,
            } => w
                .u8(op::LOCK_SET)
                .u64(handle)
                .u8(space_code(space))
                .u64(start)
                .opt_u64(end)
                .u8(lock_code(kind))
                .u8(description.into())
                .u8(wait.into()),
            Request::LockGet {
                handle,
                space,
                start,
                end,
                kind,
                description,
            } => w
                .u8(op::LOCK_GET)
                .u64(handle)
                .u8(space_code(space))
                .u64(start)
                .opt_u64(end)
                .u8(lock_code(Some(kind)))
                .u8(description.into()),
            Request::LockRelease { ino, space } => {
                w.u8(op::LOCK_RELEASE).u64(ino.0).u8(space_code(space))
            }
            _ => unreachable!("encode handles the other requests"),
        };
    }
}
