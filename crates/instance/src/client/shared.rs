//! The shared memory an attached process maps: the change page and its identity's
//! attribute table (read-only), and its connections' mailboxes (`crate::table`,
//! `crate::mailbox`).

use super::{Remote, Transport};
use crate::datatable::DataTable;
use crate::mailbox::{Conn, Mailbox};
use crate::proto::Request;
use crate::table::{ChangePage, Table};
use crate::wire::Writer;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;

impl Remote {
    /// The shared regions this process maps (read-only): where they start and their
    /// lengths (diagnostics, and the test that a stray store faults).
    /// They stay mapped after a change of identity (blanked: `set_creds`).
    pub fn shared_regions(&self) -> Vec<(usize, usize)> {
        let data = self.data.get().and_then(Option::as_ref);
        self.cache
            .get()
            .and_then(Option::as_ref)
            .map(|(page, table)| vec![page.region(), table.region()])
            .unwrap_or_default()
            .into_iter()
            .chain(data.map(DataTable::region))
            .collect()
    }

    /// The mailboxes of this process's pooled connections: where they start and their
    /// lengths (the test that a stray store faults).
    pub fn mailbox_regions(&self) -> Vec<(usize, usize)> {
        self.pool.with(|p| {
            p.iter()
                .filter_map(|(_, c)| c.mailbox().map(Mailbox::region))
                .collect()
        })
    }

    /// Where this process's posting ring is mapped, and its length, once it has one
    /// (the test that a stray store faults).
    pub fn post_ring_region(&self) -> Option<(usize, usize)> {
        self.poster.ring_region()
    }

    /// Whether stats are answered from the shared table when they can be.
    pub fn has_table(&self) -> bool {
        self.cache().is_some()
    }

    /// This identity's data table, while the table of stats is in use.
    pub(super) fn data(&self) -> Option<&DataTable> {
        self.cache()?;
        self.data.get().and_then(Option::as_ref)
    }

    pub(super) fn cache(&self) -> Option<&(ChangePage, Table)> {
        if self.cache_off.load(Ordering::Relaxed) {
            return None;
        }
        self.cache.get().and_then(Option::as_ref)
    }

    /// Sends `req`, whose reply carries up to `max` descriptors (on the socket): the
    /// descriptors, if the reply's status is 0.
    fn exchange_fds(conn: &mut Conn, req: &Request<'_>, max: usize) -> Option<Vec<OwnedFd>> {
        let mut w = Writer::new();
        req.encode(&mut w);
        conn.send(w.finish(0), &[]).ok()?;
        // The reply: its length (4) and a status, the descriptors with it.
        let mut reply = [0u8; 8];
        let fds = conn.recv_fds(&mut reply, max).ok()?;
        let status = i32::from_le_bytes([reply[4], reply[5], reply[6], reply[7]]);
        (status == 0).then_some(fds)
    }

    /// Asks for the change page, this identity's attribute table and its data table
    /// if the instance keeps one (descriptors with the reply).
    pub(super) fn fetch_tables(
        &self,
        conn: &mut Conn,
    ) -> Option<(ChangePage, Table, Option<DataTable>)> {
        let fds = Self::exchange_fds(conn, &Request::Tables, 3)?;
        if !(2..=3).contains(&fds.len()) {
            return None;
        }
        let mut fds = fds.into_iter();
        let page = ChangePage::attach(fds.next()?).ok()?;
        let table = Table::attach(fds.next()?).ok()?;
        let data = fds.next().and_then(|fd| DataTable::attach(fd).ok());
        Some((page, table, data))
    }

    /// Gives `conn` a mailbox as the transport allows (else its messages stay on the
    /// socket).
    pub(super) fn add_mailbox(&self, conn: &mut Conn) {
        let key = crate::pkey::key();
        // Without a key (said once by `augefs mount` and `augefs run`,
        // crate::pkey::UNAVAILABLE, not by every process: a program's standard error
        // is its own), only the replies come through a mailbox, read-only here.
        let writable = match (self.transport, key) {
            (Transport::Socket, _) => return,
            (Transport::Auto, None) => false,
            _ => true,
        };
        let Some(fds) = Self::exchange_fds(conn, &Request::Mailbox { writable }, 1) else {
            return;
        };
        if let Some(m) = fds
            .into_iter()
            .next()
            .and_then(|fd| Mailbox::attach(fd, writable, key).ok())
        {
            conn.set_mailbox(m);
        }
    }
}
