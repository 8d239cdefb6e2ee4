//! What the generator reads from and asks of the OS without a libc binding:
//! RSS and CPU time from /proc, thread ids, CPU pinning through `taskset -p`
//! on a thread id, and the fd limit through `prlimit`.

use std::collections::HashSet;
use std::fs;
use std::process::{Command, Stdio};

use crate::BoxError;

/// Resident set size of `pid` in KiB (VmRSS from /proc/PID/status).
pub fn rss_kib(pid: u32) -> Result<u64, BoxError> {
    let path = format!("/proc/{pid}/status");
    let status = fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .ok_or_else(|| format!("{path}: no VmRSS line").into())
}

/// utime + stime in clock ticks from a /proc/.../stat file.
fn stat_ticks(path: &str) -> Option<u64> {
    let stat = fs::read_to_string(path).ok()?;
    // The command name (field 2) may contain spaces: parse after its ')'.
    let after_comm = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_comm.split_whitespace();
    // After the name: state is field 3; utime and stime are fields 14, 15.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

pub fn process_cpu_ticks(pid: u32) -> Option<u64> {
    stat_ticks(&format!("/proc/{pid}/stat"))
}

pub fn own_cpu_ticks() -> Option<u64> {
    stat_ticks("/proc/self/stat")
}

/// Clock ticks per second for the /proc CPU counters.
pub fn clock_ticks_per_sec() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .stderr(Stdio::null())
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .filter(|&ticks| ticks > 0)
        .unwrap_or(100)
}

/// Ids of the threads of this process right now.
pub fn own_thread_ids() -> HashSet<u32> {
    fs::read_dir("/proc/self/task")
        .map(|dir| {
            dir.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn thread_name(tid: u32) -> String {
    fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
        .map(|name| name.trim_end().to_string())
        .unwrap_or_default()
}

/// CPU ticks of threads in this process that are neither in `excluded` nor
/// named with `excluded_name_prefix`. Used to split in-process server CPU
/// from client CPU. Threads that already exited are not counted.
pub fn threads_cpu_ticks(excluded: &HashSet<u32>, excluded_name_prefix: &str) -> u64 {
    own_thread_ids()
        .into_iter()
        .filter(|tid| !excluded.contains(tid))
        .filter(|&tid| !thread_name(tid).starts_with(excluded_name_prefix))
        .filter_map(|tid| stat_ticks(&format!("/proc/self/task/{tid}/stat")))
        .sum()
}

fn current_tid() -> Result<u32, BoxError> {
    // /proc/thread-self links to "<pid>/task/<tid>".
    let link = fs::read_link("/proc/thread-self")?;
    link.file_name()
        .and_then(|name| name.to_str())
        .and_then(|tid| tid.parse().ok())
        .ok_or_else(|| format!("unexpected /proc/thread-self link {link:?}").into())
}

/// CPU list the calling thread may run on (e.g. "0-1").
pub fn current_thread_cpus() -> Result<String, BoxError> {
    let status = fs::read_to_string("/proc/thread-self/status")?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
        .map(|cpus| cpus.trim().to_string())
        .ok_or_else(|| "no Cpus_allowed_list in /proc/thread-self/status".into())
}

/// Pins the calling thread (only it) to `cpus`. Threads it creates later
/// inherit the mask, which is how in-process servers and the client runtime
/// are placed on their cores.
pub fn pin_current_thread(cpus: &str) -> Result<(), BoxError> {
    let tid = current_tid()?;
    let status = Command::new("taskset")
        .args(["-p", "-c", cpus, &tid.to_string()])
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("taskset: {e} (install util-linux or drop --*-cpus)"))?;
    if !status.success() {
        return Err(format!("taskset -p -c {cpus} {tid} failed: {status}").into());
    }
    Ok(())
}

/// (soft, hard) limit on open files of this process.
pub fn fd_limits() -> Option<(u64, u64)> {
    let limits = fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))?;
    let mut numbers = line
        .trim_start_matches("Max open files")
        .split_whitespace()
        .map(|n| {
            if n == "unlimited" {
                Some(u64::MAX)
            } else {
                n.parse().ok()
            }
        });
    Some((numbers.next()??, numbers.next()??))
}

/// Raises the soft fd limit to the hard limit with `prlimit` (no libc
/// binding here). Returns the soft limit in force afterwards.
pub fn raise_fd_limit() -> Option<u64> {
    let (soft, hard) = fd_limits()?;
    if soft >= hard {
        return Some(soft);
    }
    let hard_text = if hard == u64::MAX {
        "unlimited".to_string()
    } else {
        hard.to_string()
    };
    let _ = Command::new("prlimit")
        .arg(format!("--pid={}", std::process::id()))
        .arg(format!("--nofile={hard_text}:{hard_text}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    fd_limits().map(|(soft, _)| soft)
}
