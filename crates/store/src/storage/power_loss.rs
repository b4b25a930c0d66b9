//! `PowerLossStorage`: a power-cut model. It works on the real file system (so a live store reads
//! what it wrote, as from the page cache) and keeps, beside it, what each fsync made durable:
//! per file the bytes as of its last fdatasync plus the writes and truncations since; per
//! directory its entries as of its last directory fsync plus the creates, renames and removes
//! since. `power_loss()` then rewrites the tree under its root to a state a disk may hold after
//! the power went: for every file, the durable bytes plus a seeded choice of its unsynced changes
//! (none, all, an in-order prefix whose last write is torn at a random byte, or all of them with
//! their data zeroed — the size reached the disk, the data did not); for every directory, its
//! durable entries plus a seeded in-order prefix of its unsynced changes (journaling file systems
//! keep metadata operations in order). A file linked by no surviving entry is gone.
//!
//! Crash point: like `CrashStorage`, operation N (1-based, counting every mutation) fails and so
//! does every later one, until `power_loss()`, which also re-arms the model (everything on disk
//! is durable again; no crash point) so a simulator can keep using it across reboots.
//!
//! Deterministic for a given seed and a given sequence of operations (a store's flusher thread
//! may still interleave differently from run to run). Not a file system: it follows only what
//! goes through `Storage` under its root, and treats anything else it finds there as durable.
//!
//! Locking: one mutex around the model, held across each real operation and its bookkeeping so
//! the two always agree.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

use super::{OsStorage, Storage};

type NodeId = u64;
/// (device, inode) of a live file or directory.
type Ino = (u64, u64);

#[derive(Debug, Clone)]
enum FileOp {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Clone)]
enum DirOp {
    Link(OsString, NodeId),
    Unlink(OsString),
    Rename(OsString, OsString),
}

#[derive(Debug)]
enum Node {
    File {
        durable: Vec<u8>,
        pending: Vec<FileOp>,
    },
    Dir {
        durable: BTreeMap<OsString, NodeId>,
        pending: Vec<DirOp>,
    },
}

/// A tree to write back after a power cut.
enum Entry {
    File(NodeId),
    Dir(Vec<(OsString, Entry)>),
}

/// SplitMix64: small, seeded, good enough to pick crash outcomes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when n is 0).
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        (self.next() % n as u64) as usize
    }
}

fn apply_file(bytes: &mut Vec<u8>, op: &FileOp, zeroed: bool) {
    match op {
        FileOp::Write { offset, data } => {
            let start = usize::try_from(*offset).unwrap_or(usize::MAX);
            let end = start.saturating_add(data.len());
            if bytes.len() < end {
                bytes.resize(end, 0);
            }
            if let Some(target) = bytes.get_mut(start..end) {
                if zeroed {
                    target.fill(0);
                } else {
                    target.copy_from_slice(data);
                }
            }
        }
        FileOp::SetLen(len) => bytes.resize(usize::try_from(*len).unwrap_or(usize::MAX), 0),
    }
}

fn apply_dir(entries: &mut BTreeMap<OsString, NodeId>, op: &DirOp) {
    match op {
        DirOp::Link(name, id) => {
            entries.insert(name.clone(), *id);
        }
        DirOp::Unlink(name) => {
            entries.remove(name);
        }
        DirOp::Rename(from, to) => {
            if let Some(id) = entries.remove(from) {
                entries.insert(to.clone(), id);
            }
        }
    }
}

fn ino_of(meta: &std::fs::Metadata) -> Ino {
    (meta.dev(), meta.ino())
}

fn read_whole(file: &File) -> io::Result<Vec<u8>> {
    let len = usize::try_from(file.metadata()?.len()).map_err(io::Error::other)?;
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, 0)?;
    Ok(buf)
}

fn split(path: &Path) -> io::Result<(&Path, OsString)> {
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => Ok((parent, name.to_os_string())),
        _ => Err(io::Error::other(format!(
            "{} has no parent directory",
            path.display()
        ))),
    }
}

/// The durable state of the tree plus its unsynced changes.
#[derive(Debug)]
struct Model {
    root_path: PathBuf,
    root: NodeId,
    next_id: NodeId,
    by_ino: HashMap<Ino, NodeId>,
    nodes: HashMap<NodeId, Node>,
}

impl Model {
    /// Everything under `root` as durable.
    fn scan(root: &Path) -> io::Result<Model> {
        let mut m = Model {
            root_path: root.to_path_buf(),
            root: 0,
            next_id: 0,
            by_ino: HashMap::new(),
            nodes: HashMap::new(),
        };
        m.root = m.adopt(root)?;
        Ok(m)
    }

    fn add(&mut self, ino: Ino, node: Node) -> NodeId {
        let id = self.next_id;
        self.next_id += 1;
        self.by_ino.insert(ino, id);
        self.nodes.insert(id, node);
        id
    }

    /// Registers an existing file or directory tree as durable as it is now.
    fn adopt(&mut self, path: &Path) -> io::Result<NodeId> {
        let meta = std::fs::symlink_metadata(path)?;
        if meta.is_dir() {
            let mut durable = BTreeMap::new();
            for entry in std::fs::read_dir(path)? {
                let entry = entry?;
                let child = self.adopt(&entry.path())?;
                durable.insert(entry.file_name(), child);
            }
            Ok(self.add(
                ino_of(&meta),
                Node::Dir {
                    durable,
                    pending: Vec::new(),
                },
            ))
        } else {
            let durable = std::fs::read(path)?;
            Ok(self.add(
                ino_of(&meta),
                Node::File {
                    durable,
                    pending: Vec::new(),
                },
            ))
        }
    }

    fn inside_root(&self, path: &Path) -> io::Result<()> {
        if path.starts_with(&self.root_path) {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "{} is outside the power-loss model's root {}",
                path.display(),
                self.root_path.display()
            )))
        }
    }

    fn node_for_path(&mut self, path: &Path) -> io::Result<NodeId> {
        self.inside_root(path)?;
        let meta = std::fs::symlink_metadata(path)?;
        match self.by_ino.get(&ino_of(&meta)) {
            Some(id) => Ok(*id),
            None => self.adopt(path),
        }
    }

    fn node_for_file(&mut self, file: &File) -> io::Result<NodeId> {
        let ino = ino_of(&file.metadata()?);
        if let Some(id) = self.by_ino.get(&ino) {
            return Ok(*id);
        }
        let durable = read_whole(file)?;
        Ok(self.add(
            ino,
            Node::File {
                durable,
                pending: Vec::new(),
            },
        ))
    }

    fn file_op(&mut self, id: NodeId, op: FileOp) {
        if let Some(Node::File { pending, .. }) = self.nodes.get_mut(&id) {
            pending.push(op);
        }
    }

    fn dir_op(&mut self, dir: &Path, op: DirOp) -> io::Result<()> {
        let id = self.node_for_path(dir)?;
        if let Some(Node::Dir { pending, .. }) = self.nodes.get_mut(&id) {
            pending.push(op);
        }
        Ok(())
    }

    /// The tree a power cut leaves, chosen with `rng`; `notes` says what was lost.
    fn after_power_loss(&self, id: NodeId, rng: &mut Rng, notes: &mut Vec<String>) -> Entry {
        let Some(Node::Dir { durable, pending }) = self.nodes.get(&id) else {
            return Entry::Dir(Vec::new());
        };
        // Half the time nothing unsynced survives; otherwise a random in-order prefix.
        let keep = match rng.below(4) {
            0 | 1 => 0,
            2 => rng.below(pending.len() + 1),
            _ => pending.len(),
        };
        if keep < pending.len() {
            notes.push(format!(
                "directory node {id}: {} of {} unsynced entry changes lost",
                pending.len() - keep,
                pending.len()
            ));
        }
        let mut entries = durable.clone();
        for op in pending.iter().take(keep) {
            apply_dir(&mut entries, op);
        }
        let children = entries
            .into_iter()
            .map(|(name, child)| match self.nodes.get(&child) {
                Some(Node::Dir { .. }) => (name, self.after_power_loss(child, rng, notes)),
                _ => (name, Entry::File(child)),
            })
            .collect();
        Entry::Dir(children)
    }

    /// A file's bytes after a power cut, chosen with `rng`.
    fn file_after_power_loss(&self, id: NodeId, rng: &mut Rng, notes: &mut Vec<String>) -> Vec<u8> {
        let Some(Node::File { durable, pending }) = self.nodes.get(&id) else {
            return Vec::new();
        };
        let mut bytes = durable.clone();
        if pending.is_empty() {
            return bytes;
        }
        let n = pending.len();
        let (keep, torn, zeroed) = match rng.below(20) {
            0..=9 => (0, false, false),
            10..=14 => (rng.below(n + 1), true, false),
            15..=17 => (n, false, false),
            _ => (n, false, true),
        };
        for op in pending.iter().take(keep) {
            apply_file(&mut bytes, op, zeroed);
        }
        let mut torn_bytes = 0;
        if torn {
            if let Some(FileOp::Write { offset, data }) = pending.get(keep) {
                torn_bytes = rng.below(data.len() + 1);
                let partial = FileOp::Write {
                    offset: *offset,
                    data: data.get(..torn_bytes).unwrap_or(&[]).to_vec(),
                };
                apply_file(&mut bytes, &partial, false);
            }
        }
        if keep < n || zeroed {
            notes.push(format!(
                "file node {id}: kept {keep} of {n} unsynced changes{}{}",
                if torn_bytes > 0 {
                    format!(", the next one torn after {torn_bytes} bytes")
                } else {
                    String::new()
                },
                if zeroed { ", their data zeroed" } else { "" }
            ));
        }
        bytes
    }
}

/// A `Storage` that can lose everything not fsynced; see the module comment.
#[derive(Debug)]
pub struct PowerLossStorage {
    root: PathBuf,
    seed: u64,
    losses: AtomicU64,
    model: Mutex<Model>,
    ops: AtomicU64,
    crash_at: AtomicU64,
    crashed: AtomicBool,
    real: OsStorage,
}

fn crash_error() -> io::Error {
    io::Error::other("injected power loss")
}

impl PowerLossStorage {
    /// Models the tree under `root` (everything already there counts as durable), crashing at
    /// operation `crash_at` (`u64::MAX` = never); `seed` chooses what a power cut keeps.
    pub fn new(root: &Path, seed: u64, crash_at: u64) -> io::Result<PowerLossStorage> {
        Ok(PowerLossStorage {
            root: root.to_path_buf(),
            seed,
            losses: AtomicU64::new(0),
            model: Mutex::new(Model::scan(root)?),
            ops: AtomicU64::new(0),
            crash_at: AtomicU64::new(crash_at),
            crashed: AtomicBool::new(false),
            real: OsStorage,
        })
    }

    /// Mutating operations attempted so far.
    pub fn ops(&self) -> u64 {
        self.ops.load(Ordering::SeqCst)
    }

    /// Whether the crash point was reached.
    pub fn crashed(&self) -> bool {
        self.crashed.load(Ordering::SeqCst)
    }

    /// Cuts the power: rewrites the tree under the root to what the disk keeps (see the module
    /// comment), then treats it all as durable and clears the crash point. Call it only while
    /// nothing else uses the files (the store is dropped). Returns one line per file or directory
    /// that lost something, for failure messages.
    pub fn power_loss(&self) -> io::Result<Vec<String>> {
        let mut model = self.model.lock();
        let n = self.losses.fetch_add(1, Ordering::SeqCst);
        let mut rng = Rng(self.seed ^ n.wrapping_mul(0xA076_1D64_78BD_642F));
        let mut notes = Vec::new();
        let tree = model.after_power_loss(model.root, &mut rng, &mut notes);
        let Entry::Dir(children) = tree else {
            return Err(io::Error::other("the root is not a directory"));
        };
        // File contents first (memoized: a file may survive under two names after a rename).
        let mut contents: HashMap<NodeId, Vec<u8>> = HashMap::new();
        fn collect(entries: &[(OsString, Entry)], out: &mut Vec<NodeId>) {
            for (_, e) in entries {
                match e {
                    Entry::File(id) => out.push(*id),
                    Entry::Dir(c) => collect(c, out),
                }
            }
        }
        let mut ids = Vec::new();
        collect(&children, &mut ids);
        for id in ids {
            if let std::collections::hash_map::Entry::Vacant(slot) = contents.entry(id) {
                slot.insert(model.file_after_power_loss(id, &mut rng, &mut notes));
            }
        }
        for entry in std::fs::read_dir(&self.root)? {
            let path = entry?.path();
            if std::fs::symlink_metadata(&path)?.is_dir() {
                std::fs::remove_dir_all(&path)?;
            } else {
                std::fs::remove_file(&path)?;
            }
        }
        fn write(
            dir: &Path,
            entries: &[(OsString, Entry)],
            contents: &HashMap<NodeId, Vec<u8>>,
        ) -> io::Result<()> {
            for (name, e) in entries {
                let path = dir.join(name);
                match e {
                    Entry::File(id) => {
                        std::fs::write(&path, contents.get(id).map_or(&[][..], |b| &b[..]))?
                    }
                    Entry::Dir(children) => {
                        std::fs::create_dir(&path)?;
                        write(&path, children, contents)?;
                    }
                }
            }
            Ok(())
        }
        write(&self.root, &children, &contents)?;
        *model = Model::scan(&self.root)?;
        self.crash_at.store(u64::MAX, Ordering::SeqCst);
        self.crashed.store(false, Ordering::SeqCst);
        Ok(notes)
    }

    /// Counts one operation; `Err(true)` at the crash point, `Err(false)` after it.
    fn step(&self) -> Result<(), bool> {
        if self.crashed.load(Ordering::SeqCst) {
            return Err(false);
        }
        let n = self.ops.fetch_add(1, Ordering::SeqCst) + 1;
        if n >= self.crash_at.load(Ordering::SeqCst) {
            self.crashed.store(true, Ordering::SeqCst);
            return Err(true);
        }
        Ok(())
    }
}

impl Storage for PowerLossStorage {
    fn open(&self, path: &Path, create: bool) -> io::Result<File> {
        if create && !path.exists() {
            self.step().map_err(|_| crash_error())?;
            let mut model = self.model.lock();
            let file = self.real.open(path, true)?;
            let ino = ino_of(&file.metadata()?);
            let id = model.add(
                ino,
                Node::File {
                    durable: Vec::new(),
                    pending: Vec::new(),
                },
            );
            let (parent, name) = split(path)?;
            model.dir_op(parent, DirOp::Link(name, id))?;
            return Ok(file);
        }
        if self.crashed() {
            // Opening existing files for reading keeps working after the crash.
            return OpenOptions::new().read(true).open(path);
        }
        self.real.open(path, create)
    }

    fn write_at(&self, file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
        let whole = match self.step() {
            Ok(()) => true,
            Err(true) => false,
            Err(false) => return Err(crash_error()),
        };
        let data = if whole {
            buf
        } else {
            buf.get(..buf.len() / 2).unwrap_or(&[])
        };
        let mut model = self.model.lock();
        let id = model.node_for_file(file)?;
        self.real.write_at(file, data, offset)?;
        model.file_op(
            id,
            FileOp::Write {
                offset,
                data: data.to_vec(),
            },
        );
        if whole {
            Ok(())
        } else {
            Err(crash_error())
        }
    }

    fn sync(&self, file: &File) -> io::Result<()> {
        self.step().map_err(|_| crash_error())?;
        let mut model = self.model.lock();
        let id = model.node_for_file(file)?;
        if let Some(Node::File { durable, pending }) = model.nodes.get_mut(&id) {
            for op in pending.drain(..) {
                apply_file(durable, &op, false);
            }
        }
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.step().map_err(|_| crash_error())?;
        let mut model = self.model.lock();
        let id = model.node_for_path(dir)?;
        if let Some(Node::Dir { durable, pending }) = model.nodes.get_mut(&id) {
            for op in pending.drain(..) {
                apply_dir(durable, &op);
            }
        }
        Ok(())
    }

    fn sync_filesystem(&self, _dir: &File) -> io::Result<()> {
        self.step().map_err(|_| crash_error())?;
        let mut model = self.model.lock();
        for node in model.nodes.values_mut() {
            match node {
                Node::File { durable, pending } => {
                    for op in pending.drain(..) {
                        apply_file(durable, &op, false);
                    }
                }
                Node::Dir { durable, pending } => {
                    for op in pending.drain(..) {
                        apply_dir(durable, &op);
                    }
                }
            }
        }
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.step().map_err(|_| crash_error())?;
        let mut model = self.model.lock();
        let id = model.node_for_path(from)?;
        let (from_dir, from_name) = split(from)?;
        let (to_dir, to_name) = split(to)?;
        let same_dir = model.node_for_path(from_dir)? == model.node_for_path(to_dir)?;
        self.real.rename(from, to)?;
        if same_dir {
            model.dir_op(from_dir, DirOp::Rename(from_name, to_name))
        } else {
            // Link first: a prefix of the two directories' changes never loses the file.
            model.dir_op(to_dir, DirOp::Link(to_name, id))?;
            model.dir_op(from_dir, DirOp::Unlink(from_name))
        }
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.step().map_err(|_| crash_error())?;
        let mut model = self.model.lock();
        if std::fs::symlink_metadata(path).is_err() {
            return Ok(());
        }
        let (parent, name) = split(path)?;
        self.real.remove_file(path)?;
        model.dir_op(parent, DirOp::Unlink(name))
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        self.step().map_err(|_| crash_error())?;
        let mut model = self.model.lock();
        if std::fs::symlink_metadata(path).is_err() {
            return Ok(());
        }
        let (parent, name) = split(path)?;
        // The subtree stays in the model with its durable state, in case the unlink is lost.
        self.real.remove_dir_all(path)?;
        model.dir_op(parent, DirOp::Unlink(name))
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.step().map_err(|_| crash_error())?;
        let mut model = self.model.lock();
        let missing: Vec<&Path> = path.ancestors().take_while(|p| !p.exists()).collect();
        for dir in missing.into_iter().rev() {
            model.inside_root(dir)?;
            std::fs::create_dir(dir)?;
            let ino = ino_of(&std::fs::symlink_metadata(dir)?);
            let id = model.add(
                ino,
                Node::Dir {
                    durable: BTreeMap::new(),
                    pending: Vec::new(),
                },
            );
            let (parent, name) = split(dir)?;
            model.dir_op(parent, DirOp::Link(name, id))?;
        }
        Ok(())
    }

    fn set_len(&self, file: &File, len: u64) -> io::Result<()> {
        self.step().map_err(|_| crash_error())?;
        let mut model = self.model.lock();
        let id = model.node_for_file(file)?;
        self.real.set_len(file, len)?;
        model.file_op(id, FileOp::SetLen(len));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `a` durably, then `b` without an fsync, cuts the power with many seeds: every
    /// outcome holds `a` whole, and some outcomes lose `b` (the model really drops things).
    #[test]
    fn unsynced_data_and_entries_may_vanish_synced_ones_never() {
        let mut lost_b = 0;
        let mut kept_b = 0;
        for seed in 0..64 {
            let dir = tempfile::tempdir().expect("tmp");
            let root = dir.path();
            let s = PowerLossStorage::new(root, seed, u64::MAX).expect("model");
            let f = s.open(&root.join("a"), true).expect("create a");
            s.write_at(&f, b"durable", 0).expect("write");
            s.sync(&f).expect("sync");
            s.sync_dir(root).expect("sync dir");
            s.write_at(&f, b"-tail", 7).expect("write tail");
            let g = s.open(&root.join("b"), true).expect("create b");
            s.write_at(&g, b"fresh", 0).expect("write b");
            s.sync(&g).expect("sync b");
            drop((f, g));
            s.power_loss().expect("power loss");
            let a = std::fs::read(root.join("a")).expect("a survives");
            assert!(a == b"durable" || a.starts_with(b"durable"), "{a:?}");
            match std::fs::read(root.join("b")) {
                Ok(b) => {
                    assert_eq!(b, b"fresh", "b's data was synced");
                    kept_b += 1;
                }
                Err(_) => lost_b += 1,
            }
        }
        assert!(lost_b > 0 && kept_b > 0, "lost {lost_b}, kept {kept_b}");
    }

    #[test]
    fn crash_point_fails_every_later_operation_until_the_power_loss() {
        let dir = tempfile::tempdir().expect("tmp");
        let root = dir.path();
        let s = PowerLossStorage::new(root, 1, 3).expect("model");
        let f = s.open(&root.join("x"), true).expect("op 1");
        s.write_at(&f, b"abcd", 0).expect("op 2");
        assert!(s.write_at(&f, b"efgh", 4).is_err(), "op 3 is the crash");
        assert!(s.crashed());
        assert!(s.sync(&f).is_err());
        drop(f);
        s.power_loss().expect("power loss");
        assert!(!s.crashed());
        let f = s.open(&root.join("y"), true).expect("usable again");
        s.write_at(&f, b"ok", 0).expect("write");
    }
}
