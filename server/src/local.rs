//! Small single-threaded building blocks for a network core (its runtime is one thread, so
//! `Rc` and `Cell` are all the synchronisation needed).

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::{Pin, pin};
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// Wakes every waiter when something changed (a count dropped, shutdown began). Waiters
/// re-check their condition after waking.
///
/// A waiter holds one slot while it waits and gives it back when it is dropped: futures that
/// lose a race (every read of a connection races the shutdown flag) must not leave their
/// wakers behind, or the list grows with every request until shutdown.
///
/// Not `event_listener::Event`: its listener, dropped with a notification it never took,
/// passes it on to the next listener, which may be one made after the notify (an early wake
/// that `notified`'s contract rules out); and each of its listens allocates and takes a lock
/// (about 50 ns against 6 here, measured with event-listener 5.4), on every request's path.
#[derive(Default, Debug)]
pub struct LocalNotify {
    generation: Cell<u64>,
    waiters: RefCell<Waiters>,
}

#[derive(Default, Debug)]
struct Waiters {
    slots: Vec<Option<Waker>>,
    free: Vec<usize>,
}

impl LocalNotify {
    pub fn notify_all(&self) {
        self.generation.set(self.generation.get() + 1);
        // Out of the RefCell before waking: a woken task may register again.
        let slots = {
            let mut waiters = self.waiters.borrow_mut();
            waiters.free.clear();
            std::mem::take(&mut waiters.slots)
        };
        for waker in slots.into_iter().flatten() {
            waker.wake();
        }
    }

    /// Completes at the next `notify_all` after this call.
    pub fn notified(&self) -> Notified<'_> {
        Notified {
            notify: self,
            generation: self.generation.get(),
            slot: None,
        }
    }

    /// Waiters registered now (for tests: it must not grow with dropped waiters).
    #[cfg(test)]
    fn waiting(&self) -> usize {
        let waiters = self.waiters.borrow();
        waiters.slots.len() - waiters.free.len()
    }
}

#[derive(Debug)]
pub struct Notified<'a> {
    notify: &'a LocalNotify,
    generation: u64,
    /// Our slot in `notify.waiters`, valid while `generation` is current.
    slot: Option<usize>,
}

impl Future for Notified<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if this.notify.generation.get() != this.generation {
            this.slot = None;
            return Poll::Ready(());
        }
        let mut waiters = this.notify.waiters.borrow_mut();
        match this.slot {
            Some(slot) => {
                let waker = &mut waiters.slots[slot];
                assert!(waker.is_some(), "a registered waiter lost its slot");
                if !waker.as_ref().is_some_and(|w| w.will_wake(context.waker())) {
                    *waker = Some(context.waker().clone());
                }
            }
            None => {
                let waker = Some(context.waker().clone());
                let slot = match waiters.free.pop() {
                    Some(slot) => {
                        waiters.slots[slot] = waker;
                        slot
                    }
                    None => {
                        waiters.slots.push(waker);
                        waiters.slots.len() - 1
                    }
                };
                this.slot = Some(slot);
            }
        }
        Poll::Pending
    }
}

impl Drop for Notified<'_> {
    fn drop(&mut self) {
        // After a notify_all the slots were handed out and cleared: nothing of ours is left.
        if let Some(slot) = self.slot
            && self.notify.generation.get() == self.generation
        {
            let mut waiters = self.notify.waiters.borrow_mut();
            waiters.slots[slot] = None;
            waiters.free.push(slot);
        }
    }
}

/// A flag that, once raised, stays raised and wakes its waiters.
#[derive(Default, Debug)]
pub struct LocalFlag {
    raised: Cell<bool>,
    notify: LocalNotify,
}

impl LocalFlag {
    pub fn new() -> Rc<LocalFlag> {
        Rc::new(LocalFlag::default())
    }

    pub fn raise(&self) {
        if !self.raised.replace(true) {
            self.notify.notify_all();
        }
    }

    pub fn is_raised(&self) -> bool {
        self.raised.get()
    }

    pub async fn wait(&self) {
        while !self.is_raised() {
            self.notify.notified().await;
        }
    }
}

pub enum Either<A, B> {
    Left(A),
    Right(B),
}

/// Runs two futures until the first completes; the other is dropped. `left` wins a tie.
pub async fn race<A: Future, B: Future>(left: A, right: B) -> Either<A::Output, B::Output> {
    let mut left = pin!(left);
    let mut right = pin!(right);
    std::future::poll_fn(|context| {
        if let Poll::Ready(value) = left.as_mut().poll(context) {
            return Poll::Ready(Either::Left(value));
        }
        if let Poll::Ready(value) = right.as_mut().poll(context) {
            return Poll::Ready(Either::Right(value));
        }
        Poll::Pending
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poll_once(future: Pin<&mut impl Future>) -> Poll<()> {
        let mut context = Context::from_waker(Waker::noop());
        future.poll(&mut context).map(|_| ())
    }

    #[test]
    fn dropped_waiters_leave_nothing_behind() {
        let notify = LocalNotify::default();
        for _ in 0..1000 {
            let mut waiter = pin!(notify.notified());
            // Polled many times (a task woken by something else) and then dropped (it lost
            // a race): one slot while it lives, none after.
            for _ in 0..3 {
                assert!(poll_once(waiter.as_mut()).is_pending());
            }
            assert_eq!(notify.waiting(), 1);
        }
        assert_eq!(notify.waiting(), 0);
        assert!(notify.waiters.borrow().slots.len() <= 1);
    }

    #[test]
    fn notify_all_completes_every_waiter_registered_before_it() {
        let notify = LocalNotify::default();
        let mut first = pin!(notify.notified());
        let mut second = pin!(notify.notified());
        assert!(poll_once(first.as_mut()).is_pending());
        assert!(poll_once(second.as_mut()).is_pending());
        notify.notify_all();
        assert_eq!(notify.waiting(), 0);
        assert!(poll_once(first.as_mut()).is_ready());
        // Never polled before the notify: still completes (it was created before it).
        let mut late = pin!(notify.notified());
        assert!(poll_once(second.as_mut()).is_ready());
        assert!(poll_once(late.as_mut()).is_pending());
        notify.notify_all();
        assert!(poll_once(late.as_mut()).is_ready());
    }

    #[test]
    fn a_flag_wait_that_loses_a_race_deregisters() {
        let flag = LocalFlag::new();
        for _ in 0..100 {
            let mut wait = pin!(flag.wait());
            assert!(poll_once(wait.as_mut()).is_pending());
        }
        assert_eq!(flag.notify.waiting(), 0);
        let mut wait = pin!(flag.wait());
        assert!(poll_once(wait.as_mut()).is_pending());
        flag.raise();
        assert!(poll_once(wait.as_mut()).is_ready());
    }
}
