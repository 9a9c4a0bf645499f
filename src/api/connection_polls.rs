//! Polls in progress per client connection, at most
//! `limits.max_polls_per_connection`: one client cannot hold more of the
//! node's parked polls than that by opening streams. Requests forwarded by
//! nodes are not counted (a node carries many clients' polls on one
//! connection; the owner bounds them per queue).
//!
//! Invariant: a connection's count is the number of live [`PollSlot`]s taken
//! for it; its entry is gone when the count is zero.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;

use tonic::{Request, Status};

use super::{ConnInfo, status};
use crate::security::Caller;

/// The polls in progress, by connection.
#[derive(Debug)]
pub(super) struct ConnectionPolls {
    limit: usize,
    counts: Mutex<HashMap<SocketAddr, usize>>,
}

/// One poll in progress; counted until dropped.
#[derive(Debug)]
pub(super) struct PollSlot<'a> {
    polls: &'a ConnectionPolls,
    connection: SocketAddr,
}

impl ConnectionPolls {
    pub(super) fn new(limit: usize) -> ConnectionPolls {
        ConnectionPolls { limit, counts: Mutex::new(HashMap::new()) }
    }

    /// A slot for a poll of `caller` on `connection`, or
    /// `RESOURCE_EXHAUSTED` when the connection has `limit` already.
    pub(super) fn take(&self, connection: Option<SocketAddr>, caller: &Caller) -> Result<Option<PollSlot<'_>>, Status> {
        let (Some(connection), false) = (connection, matches!(caller, Caller::Node(_))) else { return Ok(None) };
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let count = counts.entry(connection).or_insert(0);
        if *count >= self.limit {
            return Err(status::too_many_connection_polls(self.limit));
        }
        *count += 1;
        Ok(Some(PollSlot { polls: self, connection }))
    }

    #[cfg(test)]
    fn in_progress(&self, connection: SocketAddr) -> usize {
        self.counts.lock().unwrap().get(&connection).copied().unwrap_or(0)
    }
}

/// The client end of `request`'s connection.
pub(super) fn connection_of<T>(request: &Request<T>) -> Option<SocketAddr> {
    request.extensions().get::<ConnInfo>().and_then(|c| c.remote)
}

impl Drop for PollSlot<'_> {
    fn drop(&mut self) {
        let mut counts = self.polls.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = counts.get_mut(&self.connection) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.connection);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(connection: SocketAddr) -> Request<()> {
        let mut request = Request::new(());
        request.extensions_mut().insert(ConnInfo { remote: Some(connection), ..ConnInfo::default() });
        request
    }

    #[test]
    fn a_connection_holds_at_most_the_limit_and_gets_slots_back() {
        let polls = ConnectionPolls::new(2);
        let (a, b): (SocketAddr, SocketAddr) = ("127.0.0.1:1000".parse().unwrap(), "127.0.0.1:1001".parse().unwrap());
        let first = polls.take(connection_of(&on(a)), &Caller::Anyone).unwrap();
        let second = polls.take(connection_of(&on(a)), &Caller::Anyone).unwrap();
        assert_eq!(
            polls.take(connection_of(&on(a)), &Caller::Anyone).unwrap_err().code(),
            tonic::Code::ResourceExhausted
        );
        assert!(
            polls.take(connection_of(&on(b)), &Caller::Anyone).unwrap().is_some(),
            "another connection has its own"
        );
        assert!(
            polls
                .take(
                    connection_of(&on(a)),
                    &Caller::Node(crate::security::NodeCall { rpc: "PollTask".into(), partition: None })
                )
                .unwrap()
                .is_none(),
            "a node's are not counted"
        );
        drop(first);
        let third = polls.take(connection_of(&on(a)), &Caller::Anyone).unwrap();
        drop((second, third));
        assert_eq!(polls.in_progress(a), 0);
        assert!(polls.counts.lock().unwrap().is_empty(), "no entry left behind");
    }
}
