//! The simulated disk (issue 36, decision 0026): compiled only with the `simulated-disk`
//! feature, which the engine's own tests turn on and no release build does.
//!
//! It observes the disk seam (`file/disk.rs`) under a root directory. The operating system
//! still does every call — its page cache is the disk's volatile state, which the engine
//! reads back as a real kernel would serve it — while the simulation keeps, per file and per
//! directory, what the calls made durable: a file's bytes and length as of its last
//! fdatasync/fsync, a directory's entries as of its last sync, and the calls since, in order.
//!
//! A power cut, armed to fall before the N-th call (`SimulatedDisk::cut_before`), freezes
//! the disk: that call and every later one fails with EIO, as nothing runs after the power
//! is gone, and the crash image is chosen then, adversarially and from the seed:
//!
//! - a file's unsynced writes are dropped, kept, or torn: each sector (512 B or 4 KiB, chosen
//!   per cut) of each write kept or not, in any subset; unsynced length changes, allocations
//!   and hole punches kept or not; a file may keep a length whose data never arrived, the
//!   bytes past its durable data reading as zeros;
//! - a directory keeps its synced entries plus a prefix of its unsynced creations, renames,
//!   links and removals (a journaling file system commits a directory's changes in order;
//!   directories are cut independently), so every change no directory sync covered may be
//!   undone;
//! - nothing synced is ever lost (that is the contract the engine relies on; the read faults
//!   below are the exception, on purpose).
//!
//! `SimulatedDisk::restore` writes the image over the root (the engine closed first) and
//! starts a fresh simulation from it, all durable: the next open is the recovery after the
//! crash, and may itself be cut. Read faults: `fail_reads` makes reads of one sector of a
//! file fail with EIO (every read through the seam: `ReadFile`, `ScanFile`, `read_whole`),
//! `rot` changes synced bytes on the disk.
//!
//! Calls on paths under no root pass through unobserved.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

const EIO: i32 = 5;

/// A simulation's identity for a file or directory: the operating system reuses inode
/// numbers as soon as a removed file is closed, while a crash image may still need the old
/// file's synced bytes under its old name.
type NodeId = u64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    File(NodeId),
    Dir(NodeId),
}

/// A change to a file since its last sync.
#[derive(Clone, Debug)]
enum FileOp {
    Write {
        offset: u64,
        bytes: Vec<u8>,
    },
    SetLen(u64),
    /// Zeros over `len` bytes from `offset`: an allocation (`grows`: the length may grow)
    /// or a hole punch (the length stays).
    Zero {
        offset: u64,
        len: u64,
        grows: bool,
    },
}

#[derive(Debug, Default)]
struct FileNode {
    durable: Vec<u8>,
    pending: Vec<FileOp>,
}

/// A change to a directory's entries since its last sync.
#[derive(Clone, Debug)]
enum DirOp {
    Link(OsString, Entry),
    Unlink(OsString),
    /// A rename within the directory: atomic, so kept or undone whole.
    Rename(OsString, OsString),
}

#[derive(Debug, Default)]
struct DirNode {
    durable: BTreeMap<OsString, Entry>,
    pending: Vec<DirOp>,
}

fn apply_dir(entries: &mut BTreeMap<OsString, Entry>, op: &DirOp) {
    match op {
        DirOp::Link(name, entry) => {
            entries.insert(name.clone(), *entry);
        }
        DirOp::Unlink(name) => {
            entries.remove(name);
        }
        DirOp::Rename(from, to) => {
            if let Some(entry) = entries.remove(from) {
                entries.insert(to.clone(), entry);
            }
        }
    }
}

fn apply_file(bytes: &mut Vec<u8>, op: &FileOp) {
    match op {
        FileOp::Write {
            offset,
            bytes: data,
        } => write_into(bytes, *offset, data),
        FileOp::SetLen(len) => bytes.resize(*len as usize, 0),
        FileOp::Zero { offset, len, grows } => {
            let end = offset + len;
            if *grows && end as usize > bytes.len() {
                bytes.resize(end as usize, 0);
            }
            let stop = (end as usize).min(bytes.len());
            if (*offset as usize) < stop {
                bytes[*offset as usize..stop].fill(0);
            }
        }
    }
}

fn write_into(target: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let end = offset as usize + data.len();
    if target.len() < end {
        target.resize(end, 0);
    }
    target[offset as usize..end].copy_from_slice(data);
}

/// splitmix64: a small seeded generator, so that a seed replays the same choices.
#[derive(Clone, Debug)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

/// How a cut treats what was not synced: one policy per cut, so that a campaign meets the
/// extremes (everything lost, everything kept) as well as the torn middle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unsynced {
    Dropped,
    Kept,
    /// Each sector of each write, and each other change, kept with this chance in 1000.
    Torn {
        keep_per_mille: u64,
    },
}

/// What a cut chose, for a failing seed's report.
#[derive(Clone, Debug)]
pub struct CrashReport {
    /// The call the power was cut before (1-based, counted from the attach or restore).
    pub cut_before_op: u64,
    pub unsynced: Unsynced,
    pub sector_bytes: u64,
    /// Unsynced file changes kept / dropped (a write's sectors counted one by one).
    pub file_changes_kept: u64,
    pub file_changes_dropped: u64,
    /// Unsynced directory changes kept / undone.
    pub dir_changes_kept: u64,
    pub dir_changes_undone: u64,
    /// The last calls before the cut, oldest first.
    pub last_ops: Vec<String>,
}

#[derive(Debug)]
enum ImageEntry {
    File(NodeId),
    Dir(BTreeMap<OsString, ImageEntry>),
}

#[derive(Debug)]
struct Image {
    root: BTreeMap<OsString, ImageEntry>,
    files: HashMap<NodeId, Vec<u8>>,
    report: CrashReport,
}

/// Last calls kept for a report.
const OPS_LOGGED_MAX: usize = 24;

#[derive(Debug)]
struct Sim {
    root: PathBuf,
    rng: Rng,
    ops: u64,
    cut_before: Option<u64>,
    image: Option<Image>,
    next_id: NodeId,
    /// The live inode numbers' current nodes.
    live: HashMap<u64, NodeId>,
    files: HashMap<NodeId, FileNode>,
    dirs: HashMap<NodeId, DirNode>,
    root_id: NodeId,
    /// Reads that fail with EIO: (file's node, first byte, end).
    failing_reads: Vec<(NodeId, u64, u64)>,
    log: std::collections::VecDeque<String>,
}

static SIMS: Mutex<Vec<Sim>> = Mutex::new(Vec::new());
/// How many simulations are attached: calls skip the lock when none is.
static ATTACHED: AtomicUsize = AtomicUsize::new(0);

fn sims() -> MutexGuard<'static, Vec<Sim>> {
    // A panic in one simulation's test leaves the others' state usable.
    SIMS.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn eio() -> io::Error {
    io::Error::from_raw_os_error(EIO)
}

/// Runs `f` on the simulation whose root holds `path`, if any.
fn with_sim<T>(path: &Path, f: impl FnOnce(&mut Sim) -> io::Result<T>) -> io::Result<Option<T>> {
    if ATTACHED.load(Ordering::Acquire) == 0 {
        return Ok(None);
    }
    let mut sims = sims();
    match sims.iter_mut().find(|sim| path.starts_with(&sim.root)) {
        Some(sim) => f(sim).map(Some),
        None => Ok(None),
    }
}

/// `with_sim` for the record of a call that the operating system completed: a call that
/// began before the cut and ended after it (an io_uring fdatasync another actor's call
/// overtook) fails, as the power went while it ran; the crash image does not have it.
fn after<T>(path: &Path, f: impl FnOnce(&mut Sim) -> io::Result<T>) -> io::Result<()> {
    with_sim(path, |sim| {
        if sim.image.is_some() {
            return Err(eio());
        }
        f(sim)
    })
    .map(|_| ())
}

fn ino(path: &Path) -> io::Result<u64> {
    Ok(std::fs::symlink_metadata(path)?.ino())
}

fn split(path: &Path) -> io::Result<(&Path, OsString)> {
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => Ok((parent, name.to_os_string())),
        _ => Err(io::Error::other(format!(
            "simulated disk: {} has no parent directory",
            path.display()
        ))),
    }
}

impl Sim {
    fn log(&mut self, op: String) {
        if std::env::var_os("CTXSTORE_SIM_TRACE").is_some() {
            eprintln!("simulated disk: {} {op}", self.ops);
        }
        if self.log.len() == OPS_LOGGED_MAX {
            self.log.pop_front();
        }
        self.log.push_back(op);
    }

    fn new_id(&mut self) -> NodeId {
        self.next_id += 1;
        self.next_id
    }

    fn node_of_ino(&self, ino: u64, path: &Path) -> io::Result<NodeId> {
        self.live.get(&ino).copied().ok_or_else(|| {
            io::Error::other(format!(
                "simulated disk: {} was not created through the engine's file layer \
                 (engine/src/file/disk.rs); route its creation through the seam",
                path.display()
            ))
        })
    }

    fn file_mut(&mut self, path: &Path, file: &File) -> io::Result<&mut FileNode> {
        let id = self.node_of_ino(file.metadata()?.ino(), path)?;
        self.files.get_mut(&id).ok_or_else(|| {
            io::Error::other(format!("simulated disk: {} is not a file", path.display()))
        })
    }

    fn dir_of(&mut self, path: &Path) -> io::Result<(&mut DirNode, OsString)> {
        let (parent, name) = split(path)?;
        let id = self.node_of_ino(ino(parent)?, parent)?;
        let dir = self.dirs.get_mut(&id).ok_or_else(|| {
            io::Error::other(format!(
                "simulated disk: {} is not a directory",
                parent.display()
            ))
        })?;
        Ok((dir, name))
    }

    /// Loads the tree under the root as it is on disk, all of it durable.
    fn load(&mut self) -> io::Result<()> {
        self.live.clear();
        self.files.clear();
        self.dirs.clear();
        self.root_id = self.new_id();
        self.live.insert(ino(&self.root)?, self.root_id);
        let mut walk = vec![(self.root.clone(), self.root_id)];
        while let Some((dir_path, dir_id)) = walk.pop() {
            let mut dir = DirNode::default();
            let mut names: Vec<_> = std::fs::read_dir(&dir_path)?.collect::<Result<_, _>>()?;
            names.sort_by_key(std::fs::DirEntry::file_name);
            for entry in names {
                let metadata = std::fs::symlink_metadata(entry.path())?;
                let entry_id = match self.live.get(&metadata.ino()) {
                    Some(id) => *id, // a hard link to a file met already
                    None => {
                        let id = self.new_id();
                        self.live.insert(metadata.ino(), id);
                        if metadata.is_dir() {
                            walk.push((entry.path(), id));
                        } else {
                            let durable = std::fs::read(entry.path())?;
                            self.files.insert(
                                id,
                                FileNode {
                                    durable,
                                    pending: Vec::new(),
                                },
                            );
                        }
                        id
                    }
                };
                let node = if metadata.is_dir() {
                    Entry::Dir(entry_id)
                } else {
                    Entry::File(entry_id)
                };
                dir.durable.insert(entry.file_name(), node);
            }
            self.dirs.insert(dir_id, dir);
        }
        Ok(())
    }

    /// Counts a call; the armed cut falls before it.
    fn before(&mut self, path: &Path) -> io::Result<()> {
        if self.image.is_some() {
            return Err(eio());
        }
        self.ops += 1;
        if self.cut_before == Some(self.ops) {
            self.log(format!("CUT before a call on {}", path.display()));
            self.image = Some(self.crash_image());
            return Err(eio());
        }
        Ok(())
    }

    fn crash_image(&mut self) -> Image {
        let unsynced = match self.rng.below(4) {
            0 => Unsynced::Dropped,
            1 => Unsynced::Kept,
            _ => Unsynced::Torn {
                keep_per_mille: 100 + self.rng.below(800),
            },
        };
        let sector_bytes = if self.rng.chance(500) { 512 } else { 4096 };
        let mut report = CrashReport {
            cut_before_op: self.ops,
            unsynced,
            sector_bytes,
            file_changes_kept: 0,
            file_changes_dropped: 0,
            dir_changes_kept: 0,
            dir_changes_undone: 0,
            last_ops: self.log.iter().cloned().collect(),
        };
        let mut files = HashMap::new();
        let root = self.image_dir(self.root_id, &mut files, &mut report);
        Image {
            root,
            files,
            report,
        }
    }

    fn keep(&mut self, unsynced: Unsynced) -> bool {
        match unsynced {
            Unsynced::Dropped => false,
            Unsynced::Kept => true,
            Unsynced::Torn { keep_per_mille } => self.rng.chance(keep_per_mille),
        }
    }

    fn image_dir(
        &mut self,
        id: NodeId,
        files: &mut HashMap<NodeId, Vec<u8>>,
        report: &mut CrashReport,
    ) -> BTreeMap<OsString, ImageEntry> {
        let Some(dir) = self.dirs.get(&id) else {
            return BTreeMap::new();
        };
        let mut entries = dir.durable.clone();
        let pending = dir.pending.clone();
        let kept = match report.unsynced {
            Unsynced::Dropped => 0,
            Unsynced::Kept => pending.len(),
            Unsynced::Torn { .. } => self.rng.below(pending.len() as u64 + 1) as usize,
        };
        for op in &pending[..kept] {
            apply_dir(&mut entries, op);
        }
        report.dir_changes_kept += kept as u64;
        report.dir_changes_undone += (pending.len() - kept) as u64;
        let mut image = BTreeMap::new();
        for (name, entry) in entries {
            let node = match entry {
                Entry::Dir(child) => ImageEntry::Dir(self.image_dir(child, files, report)),
                Entry::File(file) => {
                    if let std::collections::hash_map::Entry::Vacant(vacant) = files.entry(file) {
                        vacant.insert(self.image_file(file, report));
                    }
                    ImageEntry::File(file)
                }
            };
            image.insert(name, node);
        }
        image
    }

    fn image_file(&mut self, id: NodeId, report: &mut CrashReport) -> Vec<u8> {
        let Some(node) = self.files.get(&id) else {
            return Vec::new();
        };
        let mut bytes = node.durable.clone();
        let pending = node.pending.clone();
        let mut live = node.durable.clone();
        for op in &pending {
            apply_file(&mut live, op);
            match op {
                FileOp::Write {
                    offset,
                    bytes: data,
                } => {
                    // Torn at sector boundaries of the file, each sector on its own.
                    let sector = report.sector_bytes;
                    let mut at = *offset;
                    let end = offset + data.len() as u64;
                    while at < end {
                        let next = ((at / sector) + 1) * sector;
                        let stop = next.min(end);
                        if self.keep(report.unsynced) {
                            let from = (at - offset) as usize;
                            write_into(&mut bytes, at, &data[from..(stop - offset) as usize]);
                            report.file_changes_kept += 1;
                        } else {
                            report.file_changes_dropped += 1;
                        }
                        at = stop;
                    }
                }
                other => {
                    if self.keep(report.unsynced) {
                        apply_file(&mut bytes, other);
                        report.file_changes_kept += 1;
                    } else {
                        report.file_changes_dropped += 1;
                    }
                }
            }
        }
        // The length reached the disk, the data did not: the rest reads as zeros.
        if !pending.is_empty()
            && live.len() > bytes.len()
            && report.unsynced != Unsynced::Dropped
            && self.rng.chance(300)
        {
            bytes.resize(live.len(), 0);
        }
        bytes
    }
}

/// A simulated disk under a root directory (see the module doc). Dropping it detaches it.
#[derive(Debug)]
pub struct SimulatedDisk {
    root: PathBuf,
}

fn with_root<T>(root: &Path, f: impl FnOnce(&mut Sim) -> T) -> T {
    let mut sims = sims();
    match sims.iter_mut().find(|sim| sim.root == root) {
        Some(sim) => f(sim),
        None => panic!("simulated disk {} is not attached", root.display()),
    }
}

impl SimulatedDisk {
    /// Observes every call under `root` (an existing directory, whose contents count as
    /// durable), its choices drawn from `seed`.
    pub fn attach(root: &Path, seed: u64) -> io::Result<SimulatedDisk> {
        let root = root.canonicalize()?;
        let mut sim = Sim {
            root: root.clone(),
            rng: Rng(seed),
            ops: 0,
            cut_before: None,
            image: None,
            next_id: 0,
            live: HashMap::new(),
            files: HashMap::new(),
            dirs: HashMap::new(),
            root_id: 0,
            failing_reads: Vec::new(),
            log: Default::default(),
        };
        sim.load()?;
        let mut sims = sims();
        assert!(
            sims.iter()
                .all(|other| !root.starts_with(&other.root) && !other.root.starts_with(&root)),
            "simulated disks under {} overlap",
            root.display()
        );
        sims.push(sim);
        ATTACHED.fetch_add(1, Ordering::AcqRel);
        Ok(SimulatedDisk { root })
    }

    /// The root, canonical: the paths the engine is given must start with it.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Calls counted since the attach or the last restore.
    pub fn ops(&self) -> u64 {
        with_root(&self.root, |sim| sim.ops)
    }

    /// Arms the power cut before the `op`-th call (counted as `ops` counts).
    pub fn cut_before(&self, op: u64) {
        with_root(&self.root, |sim| sim.cut_before = Some(op));
    }

    /// Disarms a cut that has not fallen yet.
    pub fn disarm(&self) {
        with_root(&self.root, |sim| sim.cut_before = None);
    }

    /// Whether the power is cut.
    pub fn is_cut(&self) -> bool {
        with_root(&self.root, |sim| sim.image.is_some())
    }

    /// Cuts the power now, if it is on.
    pub fn cut_now(&self) {
        with_root(&self.root, |sim| {
            if sim.image.is_none() {
                sim.log("CUT now".into());
                sim.image = Some(sim.crash_image());
            }
        });
    }

    /// Writes the crash image over the root (every engine on it closed: their handles would
    /// write to files that no longer have names) and powers the disk on again, everything
    /// in it durable. Cuts now if the power is on. Answers what the cut chose.
    pub fn restore(&self) -> io::Result<CrashReport> {
        self.cut_now();
        let (image, root) = with_root(&self.root, |sim| (sim.image.take(), sim.root.clone()));
        let Some(image) = image else {
            return Err(io::Error::other("simulated disk: no crash image"));
        };
        for entry in std::fs::read_dir(&root)? {
            let path = entry?.path();
            if std::fs::symlink_metadata(&path)?.is_dir() {
                std::fs::remove_dir_all(&path)?;
            } else {
                std::fs::remove_file(&path)?;
            }
        }
        let mut written: HashMap<NodeId, PathBuf> = HashMap::new();
        write_image(&root, &image.root, &image.files, &mut written)?;
        with_root(&self.root, |sim| {
            sim.ops = 0;
            sim.cut_before = None;
            sim.failing_reads.clear();
            sim.log.clear();
            sim.load()
        })?;
        Ok(image.report)
    }

    /// Reads of the sector (`sector_bytes`) holding `offset` in the file at `path` fail with
    /// EIO from now on (every read through the seam): a synced sector the disk can no longer
    /// read.
    pub fn fail_reads(&self, path: &Path, offset: u64, sector_bytes: u64) -> io::Result<()> {
        let ino = ino(path)?;
        with_root(&self.root, |sim| {
            let id = sim.node_of_ino(ino, path)?;
            let first = offset / sector_bytes * sector_bytes;
            sim.failing_reads.push((id, first, first + sector_bytes));
            Ok(())
        })
    }

    /// Changes synced bytes on the disk: the sector (`sector_bytes`) holding `offset` in the
    /// file at `path` reads back with every byte inverted (bit rot, a misdirected write).
    pub fn rot(&self, path: &Path, offset: u64, sector_bytes: u64) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        let ino = ino(path)?;
        let first = offset / sector_bytes * sector_bytes;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)?;
        let len = file.metadata()?.len();
        let end = (first + sector_bytes).min(len);
        if first >= end {
            return Err(io::Error::other(format!(
                "simulated disk: {} has no byte at {offset}",
                path.display()
            )));
        }
        let mut bytes = vec![0u8; (end - first) as usize];
        file.read_exact_at(&mut bytes, first)?;
        for byte in &mut bytes {
            *byte = !*byte;
        }
        file.write_all_at(&bytes, first)?;
        file.sync_all()?;
        with_root(&self.root, |sim| {
            let id = sim.node_of_ino(ino, path)?;
            if let Some(node) = sim.files.get_mut(&id) {
                write_into(&mut node.durable, first, &bytes);
            }
            Ok(())
        })
    }
}

impl Drop for SimulatedDisk {
    fn drop(&mut self) {
        let mut sims = sims();
        let before = sims.len();
        sims.retain(|sim| sim.root != self.root);
        if sims.len() < before {
            ATTACHED.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

fn write_image(
    dir: &Path,
    entries: &BTreeMap<OsString, ImageEntry>,
    files: &HashMap<NodeId, Vec<u8>>,
    written: &mut HashMap<NodeId, PathBuf>,
) -> io::Result<()> {
    for (name, entry) in entries {
        let path = dir.join(name);
        match entry {
            ImageEntry::Dir(children) => {
                std::fs::create_dir(&path)?;
                write_image(&path, children, files, written)?;
            }
            ImageEntry::File(id) => match written.get(id) {
                Some(first) => std::fs::hard_link(first, &path)?,
                None => {
                    let bytes = files.get(id).map_or(&[][..], Vec::as_slice);
                    std::fs::write(&path, bytes)?;
                    written.insert(*id, path);
                }
            },
        }
    }
    Ok(())
}

// The seam's observer calls (`file/disk.rs`), each after the operating system's call
// succeeded, except `before`.

pub(crate) fn before(path: &Path) -> io::Result<()> {
    with_sim(path, |sim| sim.before(path)).map(|_| ())
}

pub(crate) fn opened(path: &Path, file: &File, existed: bool, emptied: bool) -> io::Result<()> {
    after(path, |sim| {
        let ino = file.metadata()?.ino();
        if !existed {
            let id = sim.new_id();
            sim.live.insert(ino, id);
            sim.files.insert(id, FileNode::default());
            let (dir, name) = sim.dir_of(path)?;
            dir.pending.push(DirOp::Link(name, Entry::File(id)));
            sim.log(format!("create {}", path.display()));
        } else if emptied {
            sim.file_mut(path, file)?.pending.push(FileOp::SetLen(0));
            sim.log(format!("empty {}", path.display()));
        }
        Ok(())
    })
}

pub(crate) fn wrote(path: &Path, file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
    after(path, |sim| {
        sim.file_mut(path, file)?.pending.push(FileOp::Write {
            offset,
            bytes: bytes.to_vec(),
        });
        sim.log(format!(
            "write {} at {offset} ({} B)",
            path.display(),
            bytes.len()
        ));
        Ok(())
    })
}

pub(crate) fn set_len(path: &Path, file: &File, len: u64) -> io::Result<()> {
    after(path, |sim| {
        sim.file_mut(path, file)?.pending.push(FileOp::SetLen(len));
        sim.log(format!("set_len {} to {len}", path.display()));
        Ok(())
    })
}

pub(crate) fn zeroed(
    path: &Path,
    file: &File,
    offset: u64,
    len: u64,
    grows: bool,
) -> io::Result<()> {
    after(path, |sim| {
        sim.file_mut(path, file)?
            .pending
            .push(FileOp::Zero { offset, len, grows });
        sim.log(format!("zero {} at {offset} ({len} B)", path.display()));
        Ok(())
    })
}

pub(crate) fn synced(path: &Path, file: &File) -> io::Result<()> {
    after(path, |sim| {
        let node = sim.file_mut(path, file)?;
        let pending = std::mem::take(&mut node.pending);
        for op in &pending {
            apply_file(&mut node.durable, op);
        }
        sim.log(format!("sync {}", path.display()));
        Ok(())
    })
}

pub(crate) fn renamed(from: &Path, to: &Path) -> io::Result<()> {
    after(to, |sim| {
        let (from_dir, from_name) = split(from)?;
        let (to_dir, to_name) = split(to)?;
        if from_dir == to_dir {
            let (dir, _) = sim.dir_of(to)?;
            dir.pending.push(DirOp::Rename(from_name, to_name));
        } else {
            let entry = entry_at(sim, to)?;
            sim.dir_of(from)?.0.pending.push(DirOp::Unlink(from_name));
            sim.dir_of(to)?.0.pending.push(DirOp::Link(to_name, entry));
        }
        sim.log(format!("rename {} to {}", from.display(), to.display()));
        Ok(())
    })
    .map(|_| ())
}

fn entry_at(sim: &mut Sim, path: &Path) -> io::Result<Entry> {
    let metadata = std::fs::symlink_metadata(path)?;
    if metadata.is_dir() {
        let id = match sim.live.get(&metadata.ino()) {
            Some(id) => *id,
            None => {
                let id = sim.new_id();
                sim.live.insert(metadata.ino(), id);
                sim.dirs.insert(id, DirNode::default());
                id
            }
        };
        Ok(Entry::Dir(id))
    } else {
        Ok(Entry::File(sim.node_of_ino(metadata.ino(), path)?))
    }
}

/// A new name at `path`: a hard link, or a directory just created.
pub(crate) fn linked(path: &Path) -> io::Result<()> {
    after(path, |sim| {
        if path == sim.root {
            return Ok(());
        }
        let entry = entry_at(sim, path)?;
        let (dir, name) = sim.dir_of(path)?;
        dir.pending.push(DirOp::Link(name, entry));
        sim.log(format!("link {}", path.display()));
        Ok(())
    })
}

pub(crate) fn removed(path: &Path) -> io::Result<()> {
    after(path, |sim| {
        let (dir, name) = sim.dir_of(path)?;
        dir.pending.push(DirOp::Unlink(name));
        sim.log(format!("remove {}", path.display()));
        Ok(())
    })
}

pub(crate) fn dir_synced(dir: &Path) -> io::Result<()> {
    after(dir, |sim| {
        let id = sim.node_of_ino(ino(dir)?, dir)?;
        if let Some(node) = sim.dirs.get_mut(&id) {
            let pending = std::mem::take(&mut node.pending);
            for op in &pending {
                apply_dir(&mut node.durable, op);
            }
        }
        sim.log(format!("sync dir {}", dir.display()));
        Ok(())
    })
    .map(|_| ())
}

/// A read through the seam: EIO where a read fault covers it (`SimulatedDisk::fail_reads`).
pub(crate) fn read(path: &Path, file: &File, offset: u64, len: u64) -> io::Result<()> {
    with_sim(path, |sim| {
        if sim.failing_reads.is_empty() {
            return Ok(());
        }
        let id = sim.node_of_ino(file.metadata()?.ino(), path)?;
        let end = offset + len;
        if sim
            .failing_reads
            .iter()
            .any(|(node, first, stop)| *node == id && *first < end && offset < *stop)
        {
            return Err(eio());
        }
        Ok(())
    })
    .map(|_| ())
}
