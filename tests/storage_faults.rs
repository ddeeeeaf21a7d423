//! Storage faults: a full disk, an I/O error, a database that goes away. Whatever fails,
//! nothing the server acknowledged is lost, and what it refused lands once when retried.

mod common;

use std::path::{Path, PathBuf};

use oncehook::store::ingest::{store_receipts, Receipt, Stored};
use oncehook::store::Db;

/// A small tmpfs of its own, unmounted on drop. Only root can mount one; elsewhere the
/// drills that need a real full file system say so and stop (CI runs as root).
struct SmallDisk {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(megabytes: u32) -> Option<SmallDisk> {
        if !nix::unistd::geteuid().is_root() {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI runs as root: the disk-full drills must run there"
            );
            eprintln!("not root: no tmpfs to fill, skipping this disk-full drill");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={megabytes}m"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("run mount");
        assert!(status.success(), "mount a {megabytes} MB tmpfs");
        Some(SmallDisk {
            path: dir.path().to_path_buf(),
            _dir: dir,
        })
    }

    fn path(&self) -> &Path {
        &self.path
    }

    /// Fills the file system to the last byte with `filler` (like `dd if=/dev/zero`).
    fn fill(&self) -> PathBuf {
        use std::io::Write;
        let filler = self.path.join("filler");
        let mut file = std::fs::File::create(&filler).unwrap();
        let block = vec![0u8; 4096];
        while file.write_all(&block).is_ok() {}
        // The last partial block too: nothing is left.
        let _ = file.write_all(&[0u8; 1]);
        let _ = file.sync_all();
        filler
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.path)
            .status();
    }
}

fn receipt(i: usize) -> Receipt {
    Receipt {
        provider: "stripe".into(),
        event_id: format!("evt_full_{i}"),
        event_type: Some("payment_intent.succeeded".into()),
        api_version: None,
        raw_body: vec![b'x'; 1500],
        correlation_id: format!("c{i}"),
        received_at: i as i64,
    }
}

/// The store-level story of issue 44: a commit fails because the disk is full, space comes
/// back, later commits say they succeeded. Every batch `store_receipts` reported committed
/// must be in the database as a fresh connection sees it, before and after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_commit_fails_on_a_full_disk_every_later_commit_is_durable() {
    let Some(disk) = SmallDisk::mount(24) else {
        return;
    };
    let url = format!("sqlite://{}", disk.path().join("oncehook.db").display());
    let db = Db::connect(&url).await.unwrap();
    db.migrate().await.unwrap();

    let mut acknowledged = Vec::new();
    let mut refused = 0;
    let mut next = 0;
    let mut batch = |n: usize| {
        let b: Vec<Receipt> = (next..next + n).map(receipt).collect();
        next += n;
        b
    };
    // Some before, then the disk fills, then commits fail, then space comes back.
    for _ in 0..20 {
        let b = batch(16);
        store_receipts(&db, &b).await.unwrap();
        acknowledged.extend(b.into_iter().map(|r| r.event_id));
    }
    let filler = disk.fill();
    for _ in 0..50 {
        let b = batch(16);
        match store_receipts(&db, &b).await {
            Ok(stored) => {
                assert!(stored.iter().all(|s| *s == Stored::New));
                acknowledged.extend(b.into_iter().map(|r| r.event_id));
            }
            Err(_) => refused += 1,
        }
    }
    assert!(refused > 0, "a full disk refused no commit");
    std::fs::remove_file(filler).unwrap();
    for _ in 0..20 {
        let b = batch(16);
        store_receipts(&db, &b)
            .await
            .expect("space is back: commits succeed again");
        acknowledged.extend(b.into_iter().map(|r| r.event_id));
    }

    let seen = |db: Db| async move {
        let ids: Vec<String> = sqlx::query_scalar("SELECT event_id FROM inbox_events")
            .fetch_all(db.reader())
            .await
            .unwrap();
        db.close().await;
        ids.into_iter().collect::<std::collections::BTreeSet<_>>()
    };
    // A second process's view while the first is still open, then after it closed.
    let other = Db::connect(&url).await.unwrap();
    let while_open = seen(other).await;
    db.close().await;
    let after_restart = seen(Db::connect(&url).await.unwrap()).await;
    for (when, stored) in [
        ("while open", &while_open),
        ("after restart", &after_restart),
    ] {
        let lost: Vec<_> = acknowledged
            .iter()
            .filter(|id| !stored.contains(*id))
            .collect();
        assert!(
            lost.is_empty(),
            "{when}: {} of {} acknowledged events are not stored ({refused} batches refused), \
             e.g. {:?}",
            lost.len(),
            acknowledged.len(),
            lost.iter().take(3).collect::<Vec<_>>()
        );
    }
}
