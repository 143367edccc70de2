//! Small single-threaded building blocks for a network core (its runtime is one thread, so
//! `Rc` and `Cell` are all the synchronisation needed).

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::{Pin, pin};
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// Wakes every waiter when something changed (a count dropped, shutdown began). Waiters
/// re-check their condition after waking.
#[derive(Default, Debug)]
pub struct LocalNotify {
    generation: Cell<u64>,
    waiters: RefCell<Vec<Waker>>,
}

impl LocalNotify {
    pub fn notify_all(&self) {
        self.generation.set(self.generation.get() + 1);
        for waker in self.waiters.borrow_mut().drain(..) {
            waker.wake();
        }
    }

    /// Completes at the next `notify_all` after this call.
    pub fn notified(&self) -> Notified<'_> {
        Notified {
            notify: self,
            generation: self.generation.get(),
        }
    }
}

pub struct Notified<'a> {
    notify: &'a LocalNotify,
    generation: u64,
}

impl Future for Notified<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<()> {
        if self.notify.generation.get() != self.generation {
            return Poll::Ready(());
        }
        self.notify
            .waiters
            .borrow_mut()
            .push(context.waker().clone());
        Poll::Pending
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
