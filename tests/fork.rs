//! A process that forks after stitching code: the child stitches and runs code of its
//! own, and neither process overwrites code the other runs (the stitch tier's code heap
//! maps its memory shared between the two on Linux x86-64); the child's stencil library
//! works without the parent's worker thread.
//!
//! The fork happens in a child test process that runs only this scenario, so that no
//! other test's thread is cut off in the middle of holding a lock.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use dyc::{Arg, Program, Specialized, Tier};

const SCALE: &str = "fn scale(k: i64, x: i64) -> i64 {
    make_static(k);
    return k * x + 1;
}
";

const SCENARIO: &str = "DYC_FORK_SCENARIO";

fn call(spec: &Specialized, x: i64) -> Option<i64> {
    spec.call(&mut [Arg::from(x)])
        .ok()
        .flatten()
        .and_then(|c| c.as_i64())
}

/// The parent stitches `k = 3`, forks, and the child drops that code and stitches 300
/// specializations of its own, keeping them all, each checked; then the parent runs its
/// code again, stitches more, and checks everything. Had the child reused the parent's
/// pages (shared memory), the parent's code would be another `k`'s, or garbage.
fn scenario() -> Result<(), String> {
    let p = Program::compile(SCALE).map_err(|e| e.to_string())?;
    let scale = p.region("scale").map_err(|e| e.to_string())?;
    let stitch = |k: i64| {
        scale
            .specialize_in(&[Arg::from(k)], Tier::Stitch)
            .map_err(|e| e.to_string())
    };
    let a = stitch(3)?;
    if call(&a, 5) != Some(16) {
        return Err("the parent's code before the fork".into());
    }
    // SAFETY: this process runs no other thread that could hold a lock the child needs:
    // the test harness's main thread only waits for this one, and the runtime holds the
    // locks of its stencil library's worker thread across the fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err("fork failed".into());
    }
    if pid == 0 {
        let ok = (|| {
            if call(&a, 5) != Some(16) {
                return None;
            }
            drop(a);
            let mine: Vec<_> = (100..400).map(stitch).collect::<Result<_, _>>().ok()?;
            // The child's own stencil worker (if its units wanted any stencil) makes what
            // they wanted; waiting for it returns.
            dyc::settle_stencils();
            Some(
                mine.iter()
                    .zip(100..)
                    .all(|(s, k)| call(s, 5) == Some(k * 5 + 1)),
            )
        })();
        // SAFETY: ends the child without running the test harness's exit path.
        unsafe { libc::_exit(if ok == Some(true) { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for the child just made.
    if unsafe { libc::waitpid(pid, &mut status, 0) } != pid {
        return Err("waitpid failed".into());
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(format!("the child failed (status {status:#x})"));
    }
    let more: Vec<_> = (1000..1100).map(stitch).collect::<Result<_, _>>()?;
    for (s, k) in more.iter().zip(1000..) {
        if call(s, 5) != Some(k * 5 + 1) {
            return Err(format!("the parent's code for k = {k} after the fork"));
        }
    }
    match call(&a, 5) {
        Some(16) => Ok(()),
        r => Err(format!("the parent's first code after the fork gave {r:?}")),
    }
}

#[test]
fn code_stitched_before_a_fork_survives_in_both_processes() {
    if std::env::var_os(SCENARIO).is_some() {
        scenario().expect("the fork scenario");
        println!("fork scenario passed");
        return;
    }
    let exe = std::env::current_exe().expect("the test binary");
    let out = std::process::Command::new(exe)
        .args([
            "code_stitched_before_a_fork_survives_in_both_processes",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(SCENARIO, "1")
        .output()
        .expect("runs the scenario");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("fork scenario passed"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
