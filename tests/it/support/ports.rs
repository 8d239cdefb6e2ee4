//! Ports for programs the tests start (nginx, redis-server, the gateway's upstreams) that
//! take their port from the command line or config: a port found free is only free until someone else binds it, and
//! the tests run in parallel. A program that loses that race fails to bind and exits, while
//! the address answers all the same, someone else's. [`owns_listener`] tells the two apart,
//! so that the starters can try another port instead of testing against a stranger
//! ([`listening_child`] for any program given its port).

use super::interop::KillOnDrop;
use super::READ_TIMEOUT;
use std::net::{SocketAddr, TcpListener};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// A loopback port free at the time of the call.
pub fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
}

/// Whether the process `pid` holds a socket listening on the IPv4 `addr`, the exact address
/// it bound (not `0.0.0.0`): the socket's inode, from `/proc/net/tcp`, is among the
/// process's descriptors. Linux only; elsewhere it says yes (the check is then not made).
/// An IPv6 address is never owned: its table is not read.
pub fn owns_listener(pid: u32, addr: SocketAddr) -> bool {
    if !cfg!(target_os = "linux") {
        return true;
    }
    let SocketAddr::V4(addr) = addr else {
        return false;
    };
    // The kernel writes the address as the native-endian number of its network-order bytes,
    // the port in host order, in hex; state 0A is LISTEN.
    let local = format!(
        "{:08X}:{:04X}",
        u32::from_ne_bytes(addr.ip().octets()),
        addr.port()
    );
    let Ok(table) = std::fs::read_to_string("/proc/net/tcp") else {
        return false;
    };
    // Every listener on the address (more than one with SO_REUSEPORT).
    let sockets: Vec<String> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.get(1) == Some(&local.as_str()) && fields.get(3) == Some(&"0A"))
                .then(|| fields.get(9).map(|inode| format!("socket:[{inode}]")))
                .flatten()
        })
        .collect();
    !sockets.is_empty()
        && std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
            fds.flatten().any(|fd| {
                std::fs::read_link(fd.path()).is_ok_and(|target| {
                    sockets
                        .iter()
                        .any(|socket| target.as_os_str() == socket.as_str())
                })
            })
        })
}

/// Waits until `child` listens on each of `addrs` itself (`Ok`), or exits first (`Err`
/// with its status: it lost its port to someone else, or failed). `child` is killed, and
/// the test fails, when neither comes within [`READ_TIMEOUT`].
pub fn wait_listening(
    child: &mut Child,
    addrs: &[SocketAddr],
    what: &str,
) -> Result<(), ExitStatus> {
    let deadline = Instant::now() + READ_TIMEOUT;
    loop {
        if addrs.iter().all(|addr| owns_listener(child.id(), *addr)) {
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} does not listen on {addrs:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The process `spawn` starts to listen on the loopback port it is given, once it listens
/// there itself ([`wait_listening`]): on another free port when it exits first (five
/// tries).
pub fn listening_child(what: &str, mut spawn: impl FnMut(u16) -> Child) -> (KillOnDrop, u16) {
    let mut exits = Vec::new();
    for _ in 0..5 {
        let addr = free_port();
        let mut child = KillOnDrop(spawn(addr.port()));
        match wait_listening(&mut child.0, &[addr], what) {
            Ok(()) => return (child, addr.port()),
            Err(status) => exits.push(status),
        }
    }
    panic!("{what} exited before listening, on five ports in a row: {exits:?}")
}

#[cfg(target_os = "linux")]
#[test]
fn a_listener_is_told_from_someone_elses() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    assert!(owns_listener(std::process::id(), addr));
    // Another process (this one's parent) does not hold it.
    assert!(!owns_listener(std::os::unix::process::parent_id(), addr));
    // A socket of this process that does not listen (a connection's own end) is no
    // listener, whoever may bind its port meanwhile.
    let connection = std::net::TcpStream::connect(addr).expect("connect");
    let end = connection.local_addr().expect("its address");
    assert!(!owns_listener(std::process::id(), end));
}
