//! Points where the service layer stops until a test lets it go on (test builds only), so a
//! test can land one operation exactly inside another.

use parking_lot::Mutex;
use tokio::sync::oneshot;

/// The points.
#[derive(Debug, Default)]
pub(crate) struct Hooks {
    /// In a removal: the host let go of the session, the manager has not deleted it yet.
    pub(crate) before_delete: Point,
    /// In an open: its place under the open cap is held, its file not read yet.
    pub(crate) before_load: Point,
}

/// One point: the next pass stops here if a test asked it to.
#[derive(Debug, Default)]
pub(crate) struct Point {
    pause: Mutex<Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>>,
}

impl Point {
    /// The next pass stops here: the receiver fires when it does, and it goes on when the
    /// sender sends (or is dropped).
    pub(crate) fn pause(&self) -> (oneshot::Receiver<()>, oneshot::Sender<()>) {
        let (reached, at) = oneshot::channel();
        let (resume, resumed) = oneshot::channel();
        *self.pause.lock() = Some((reached, resumed));
        (at, resume)
    }

    /// Passes the point, stopping if a test asked to.
    pub(crate) async fn pass(&self) {
        let pause = self.pause.lock().take();
        if let Some((reached, resume)) = pause {
            let _ = reached.send(());
            let _ = resume.await;
        }
    }
}
