//! Per-thread pools of working state: a specialization's vectors and tables, emptied but
//! with their capacity, left on its thread for the next one of the same kind, so that a
//! short unit does not spend its time allocating. A pool holds values of any types, found
//! by type; a caller decides how many it keeps and how large a kept value may be.

use std::any::Any;
use std::cell::RefCell;
use std::thread::LocalKey;

/// A thread's pool (declare one with `thread_local!`, `const { RefCell::new(Vec::new()) }`).
pub type Pool = RefCell<Vec<Box<dyn Any>>>;

/// The value of type `T` given to `pool` last, if it holds one. (A thread being torn
/// down, or a caller using the pool already, just gets none.)
pub fn take<T: 'static>(pool: &'static LocalKey<Pool>) -> Option<Box<T>> {
    pool.try_with(|values| {
        let mut values = values.try_borrow_mut().ok()?;
        let k = values.iter().rposition(|v| v.is::<T>())?;
        values.remove(k).downcast::<T>().ok()
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

/// A value that goes back to a pool when its user is done with it.
pub trait Reuse: Default + 'static {
    /// Empties the value, keeping its room (or what is worth keeping of it); `false` if
    /// it grew too large to keep.
    fn reset(&mut self) -> bool;
}

/// A value of `T` from a thread's pool (or a new one) for as long as this lives, given
/// back reset when dropped. (A user inside another's lifetime on the same thread gets a
/// value of its own; the other's comes back when it is done.)
pub struct Kept<T: Reuse> {
    value: Option<Box<T>>,
    pool: &'static LocalKey<Pool>,
    most: usize,
}

impl<T: Reuse> Kept<T> {
    /// A value from `pool`, which keeps at most `most` values.
    pub fn take(pool: &'static LocalKey<Pool>, most: usize) -> Kept<T> {
        Kept {
            value: Some(take(pool).unwrap_or_default()),
            pool,
            most,
        }
    }
}

impl<T: Reuse> std::ops::Deref for Kept<T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.value.as_ref().expect("the value until dropped")
    }
}

impl<T: Reuse> std::ops::DerefMut for Kept<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.value.as_mut().expect("the value until dropped")
    }
}

impl<T: Reuse> Drop for Kept<T> {
    fn drop(&mut self) {
        if let Some(mut v) = self.value.take() {
            if v.reset() {
                give(self.pool, v, self.most);
            }
        }
    }
}
