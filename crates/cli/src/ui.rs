//! Terminal output helpers: progress bars and times.

use indicatif::{ProgressBar, ProgressStyle};

/// An indicatif bar behind the engine's Progress trait. Hidden when stderr is not a
/// terminal (indicatif's default), so scripts and tests see clean output.
pub struct Bar {
    bar: ProgressBar,
}

impl Bar {
    pub fn new() -> Bar {
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template("{msg:32} [{bar:30}] {bytes}/{total_bytes}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        Bar { bar }
    }
}

impl engine::progress::Progress for Bar {
    fn step(&self, name: &str, total: u64) {
        self.bar.set_message(name.to_string());
        self.bar.set_length(total);
        self.bar.set_position(0);
    }

    fn advance(&self, delta: u64) {
        self.bar.inc(delta);
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// How long a command waits for a process that still holds an image but no longer
/// serves it (a mount daemon making its unmount durable; device::holder).
pub const HOLDER_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// The one line a command prints when it starts waiting for such a holder.
pub fn say_waiting(image: &std::path::Path) -> impl FnMut(&device::holder::Holder) + '_ {
    move |h| {
        eprintln!(
            "augefs: {} is {}, which no longer serves it (an unmount finishing); waiting up to {} s for it to let go",
            image.display(),
            h,
            HOLDER_WAIT.as_secs()
        )
    }
}
