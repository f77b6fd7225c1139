//! Per-thread pools of working state: a specialization's vectors and tables, emptied but
//! with their capacity, left on its thread for the next one of the same kind, so that a
//! short unit does not spend its time allocating. A pool holds values of any types, found
//! by type; a caller decides how many it keeps and how large a kept value may be.

use std::any::Any;
use std::cell::RefCell;
use std::thread::LocalKey;

/// A thread's pool (declare one with `thread_local!`, `const { RefCell::new(Vec::new()) }`).
pub type Pool = RefCell<Vec<Box<dyn Any>>>;

/// A value of type `T` from `pool`, if it holds one. (A thread being torn down, or a
/// caller using the pool already, just gets none.)
pub fn take<T: 'static>(pool: &'static LocalKey<Pool>) -> Option<Box<T>> {
    pool.try_with(|values| {
        let mut values = values.try_borrow_mut().ok()?;
        let k = values.iter().position(|v| v.is::<T>())?;
        values.swap_remove(k).downcast::<T>().ok()
    })
    .ok()
    .flatten()
}

/// Keeps `value` in `pool` unless it holds `most` values already.
pub fn give<T: 'static>(pool: &'static LocalKey<Pool>, value: Box<T>, most: usize) {
    let _ = pool.try_with(|values| {
        if let Ok(mut values) = values.try_borrow_mut() {
            if values.len() < most {
                values.push(value);
            }
        }
    });
}
