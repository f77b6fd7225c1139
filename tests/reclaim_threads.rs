//! Versions evicted by other threads than the ones that made them, among them threads that
//! have exited, are all freed: after many short-lived threads specialize and evict each
//! other's versions, dropping the program and flushing the reclamation scheme gives back
//! every code region, code byte, byte of the code heap and fault site record. One test in
//! its own binary, since the counts are process-wide.

use dyc::runtime_live as live;
use dyc::{epoch, Arg, Limits, Program, RuntimeOptions};

const SRC: &str = "fn f(k: i64, x: i64, xs: [i64]) -> i64 {
    make_static(k);
    var acc = 0;
    var i = 0;
    while i < k % 9 {
        acc = acc + xs[i % len(xs)] * x;
        i += 1;
    }
    return acc / (k % 5 + 1);
}
";

#[test]
fn versions_evicted_across_threads_that_come_and_go_are_all_freed() {
    let start = live();
    let xs = [1i64, 2, 3];
    {
        let options = RuntimeOptions {
            limits: Limits {
                max_specializations: 4,
                ..Limits::default()
            },
            ..RuntimeOptions::default()
        };
        let p = Program::compile_with("churn.dyc", SRC, options).expect("compiles");
        let f = p.region("f").expect("region");
        for round in 0..6i64 {
            // Four threads at a time, each making versions the others evict, then exiting
            // (their versions evicted later are freed by whoever collects).
            std::thread::scope(|s| {
                for t in 0..4i64 {
                    let f = f.clone();
                    s.spawn(move || {
                        for i in 0..150i64 {
                            let k = (round * 4 + t) * 100 + i % 23;
                            let got = f
                                .call(&mut [Arg::from(k), Arg::from(2i64), Arg::from(&xs[..])])
                                .expect("runs");
                            let acc: i64 = (0..k % 9).map(|j| xs[j as usize % 3] * 2).sum();
                            let want = acc / (k % 5 + 1);
                            assert_eq!(got, Some(want.into()), "k = {k}");
                        }
                    });
                }
            });
            assert!(f.stats().evictions > 0);
        }
        assert!(f.stats().versions <= 4);
        // A thread's versions, evicted while it waits (so that the collections hand
        // their frees to it), and the thread then exits without another call: the frees
        // wait in its mail until a collection finds it gone.
        let call = |f: &dyc::Region, k: i64| {
            f.call(&mut [Arg::from(k), Arg::from(2i64), Arg::from(&xs[..])])
                .expect("runs");
        };
        let (made_tx, made_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|s| {
            let f2 = f.clone();
            s.spawn(move || {
                (1000..1004).for_each(|k| call(&f2, k));
                made_tx.send(()).unwrap();
                go_rx.recv().unwrap();
            });
            made_rx.recv().unwrap();
            let evicted = f.stats().evictions;
            (2000..2004).for_each(|k| call(&f, k));
            assert_eq!(f.stats().evictions, evicted + 4);
            // Two collections: the first clears the front table of each entry, the second
            // finds its free ready (the waiting thread is not pinned).
            epoch::collect();
            epoch::collect();
            go_tx.send(()).unwrap();
        });
    }
    epoch::flush();
    assert_eq!(live(), start);
}
