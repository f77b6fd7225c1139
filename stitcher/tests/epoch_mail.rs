//! A function deferred to a thread ([`epoch::defer_to`]) runs on that thread, and only
//! waits for it until the next collection. Alone in its own test binary, so that no other
//! test's pins or collections interleave with the ones it counts.

use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use dyc_stitcher::runtime::epoch;

#[test]
fn a_function_deferred_to_a_thread_runs_there_or_at_the_next_collection() {
    let ran: Arc<Mutex<Vec<ThreadId>>> = Arc::default();
    let (home_tx, home_rx) = channel();
    // Messages to the home thread: unpin, defer to itself and collect, stop.
    let (go_tx, go_rx) = channel::<u8>();
    let ran_home = ran.clone();
    let home_thread = std::thread::spawn(move || {
        home_tx.send(epoch::home()).unwrap();
        loop {
            match go_rx.recv().unwrap() {
                0 => drop(epoch::pin()),
                1 => {
                    let ran = ran_home.clone();
                    epoch::defer_to(epoch::home(), move || {
                        ran.lock().unwrap().push(std::thread::current().id())
                    });
                    epoch::collect();
                }
                _ => break,
            }
            home_tx.send(epoch::home()).unwrap();
        }
    });
    let home = home_rx.recv().unwrap();
    let id = home_thread.thread().id();
    let defer_logged = || {
        let ran = ran.clone();
        epoch::defer_to(home, move || {
            ran.lock().unwrap().push(std::thread::current().id())
        });
    };
    let log = || std::mem::take(&mut *ran.lock().unwrap());

    // Ready at the first collection (no thread is pinned), and handed to the home thread,
    // which runs it when it next unpins.
    defer_logged();
    epoch::collect();
    assert_eq!(log(), [], "handed over, not run by the collection");
    go_tx.send(0).unwrap();
    home_rx.recv().unwrap();
    assert_eq!(log(), [id], "run by the home thread as it unpinned");

    // The home thread does not unpin again: the next collection runs it.
    defer_logged();
    epoch::collect();
    assert_eq!(log(), [], "handed over");
    epoch::collect();
    assert_eq!(
        log(),
        [std::thread::current().id()],
        "run by the next collection"
    );

    // `flush` runs what waits for any thread.
    defer_logged();
    epoch::flush();
    assert_eq!(log(), [std::thread::current().id()], "run by the flush");

    // Deferred by the home thread to itself: run by its own collection.
    go_tx.send(1).unwrap();
    home_rx.recv().unwrap();
    assert_eq!(log(), [id], "run by the home thread's collection");

    go_tx.send(2).unwrap();
    home_thread.join().unwrap();
    // Once the home thread has exited, its functions run wherever they are collected.
    defer_logged();
    epoch::collect();
    assert_eq!(
        log(),
        [std::thread::current().id()],
        "home thread gone: run here"
    );
}
