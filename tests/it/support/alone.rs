//! A test that must be the only thing running in its process: one that measures what the
//! process allocates (`decode_memory`). In this binary, tests run side by side on the
//! harness's threads, so such a test runs this binary again with only itself selected, on
//! one test thread, and passes or fails with that child.

use std::process::Command;

/// Set in the child, to the name of the test it runs alone.
const ALONE: &str = "MCP_WS_TEST_ALONE";

/// `true` in the child process that runs `test` alone: the caller goes on with the test.
/// Otherwise (the test as the harness runs it, beside others), runs `test` (its name as the
/// harness lists it, `module::function`) in a child process of this binary, fails unless it
/// ran there and passed, and returns `false`: the caller returns.
pub fn in_own_process(test: &str) -> bool {
    if std::env::var_os(ALONE).is_some_and(|name| name == test) {
        return true;
    }
    let output = Command::new(std::env::current_exe().expect("the test binary's path"))
        .args([test, "--exact", "--test-threads=1"])
        .env(ALONE, test)
        .output()
        .expect("the test binary runs again");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{test}, run alone in a process of its own, failed or did not run:\n{stdout}\n{stderr}"
    );
    false
}
