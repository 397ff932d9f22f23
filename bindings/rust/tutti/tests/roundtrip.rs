//! The Rust binding against a real pool: bytes stored are the bytes loaded, slices are
//! borrowed, errors carry codes, a runtime is shared between threads.
use std::ffi::c_void;
use std::path::PathBuf;

use tutti::{Layout, Memory, Op, Request, Runtime};

const LAYERS: u32 = 3;
const BLOCKS: u32 = 64;
const BT: u32 = 16;
const HEADS: u32 = 2;
const DIM: u32 = 64;
const BLOCK_BYTES: usize = (BT * HEADS * DIM * 2) as usize;
const LAYER_BYTES: usize = 2 * BLOCKS as usize * BLOCK_BYTES;

/// A fused [2, blocks, bt, heads, dim] fp16-sized cache per layer, pseudo-random bytes.
struct Kv {
    mem: Vec<u8>,
}

impl Kv {
    fn new(seed: u64) -> Kv {
        let mut x = seed.wrapping_mul(0x9e3779b97f4a7c15) | 1;
        let mem = (0..LAYERS as usize * LAYER_BYTES)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        Kv { mem }
    }
    fn layout(&mut self) -> Layout {
        let base = self.mem.as_mut_ptr();
        Layout {
            layers: LAYERS, blocks: BLOCKS, block_tokens: BT, kv_heads: HEADS, head_dim: DIM, elem_bytes: 2,
            hnd: false, memory: Memory::Host,
            // Safety (pointer arithmetic): offsets stay inside mem.
            k: (0..LAYERS as usize).map(|l| unsafe { base.add(l * LAYER_BYTES) } as *mut c_void).collect(),
            v: None, v_offset: None,
        }
    }
    fn block(&self, layer: usize, side: usize, b: i32) -> &[u8] {
        let at = layer * LAYER_BYTES + side * LAYER_BYTES / 2 + b as usize * BLOCK_BYTES;
        &self.mem[at..at + BLOCK_BYTES]
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tutti-rust-{}-{}", name, std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn open(dir: &PathBuf, kv: &mut Kv) -> Runtime {
    let pool = dir.join("pool");
    let rt = Runtime::open(&[("pool", pool.to_str().unwrap()), ("capacity", "64M"), ("chunk_tokens", "64"),
                             ("staging", "8M")]).unwrap();
    // Safety: kv outlives rt in every test (declared before it, dropped after).
    unsafe { rt.register_kv(&kv.layout()) }.unwrap();
    rt
}

fn run(rt: &Runtime, op: Op, reqs: &[Request]) -> tutti::Result<Vec<tutti::RequestResult>> {
    let mut b = rt.batch(op)?;
    b.add(reqs)?;
    b.submit()?;
    for l in 0..LAYERS {
        b.wait_layer(l)?;
    }
    b.wait()?;
    (0..reqs.len()).map(|i| b.result(i)).collect()
}

#[test]
fn store_lookup_load_layer_by_layer() {
    let dir = temp_dir("roundtrip");
    let mut kv = Kv::new(1);
    let rt = open(&dir, &mut kv);
    assert!(rt.backend() == "uring" || rt.backend() == "posix");
    let tokens: Vec<i32> = (1000..1320).collect();
    let stored: Vec<i32> = (0..20).collect();
    let loaded: Vec<i32> = (20..40).collect();
    let r = run(&rt, Op::Store, &[Request::new(&tokens, &stored)]).unwrap();
    assert_eq!(r[0], tutti::RequestResult { status: 0, chunks: 5, chunks_ok: 5, tokens: 320 });
    assert_eq!(rt.lookup(&tokens, None).unwrap(), 320);
    assert_eq!(rt.lookup(&tokens[..100], None).unwrap(), 64);
    let mut b = rt.batch(Op::Load).unwrap();
    b.add(&[Request::new(&tokens, &loaded)]).unwrap();
    b.submit().unwrap();
    for l in 0..LAYERS {
        b.wait_layer(l).unwrap();
    }
    b.wait().unwrap();
    assert_eq!(b.chunk_status(0).unwrap(), vec![0; 5]);
    drop(b);
    for l in 0..LAYERS as usize {
        for side in 0..2 {
            for i in 0..stored.len() {
                assert!(kv.block(l, side, loaded[i]) == kv.block(l, side, stored[i]), "layer {} block {}", l, loaded[i]);
            }
        }
    }
    let s = rt.stats().unwrap();
    assert_eq!(s.stored_chunks, 5);
    assert_eq!(rt.layer_wait_ns().unwrap().len(), LAYERS as usize);
    drop(rt);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn salts_ranges_and_errors() {
    let dir = temp_dir("errors");
    let mut kv = Kv::new(2);
    let rt = open(&dir, &mut kv);
    let tokens: Vec<i32> = (0..128).collect();
    let table: Vec<i32> = (0..8).collect();
    let salted = Request { salt: Some(b"lora-7"), ..Request::new(&tokens, &table) };
    run(&rt, Op::Store, &[salted]).unwrap();
    assert_eq!(rt.lookup(&tokens, None).unwrap(), 0);
    assert_eq!(rt.lookup(&tokens, Some(b"lora-7")).unwrap(), 128);
    let second = Request { token_begin: 64, ..salted };
    assert_eq!(run(&rt, Op::Load, &[second]).unwrap()[0].tokens, 64);

    let bad_table = vec![BLOCKS as i32 + 1; 8];
    let mut b = rt.batch(Op::Load).unwrap();
    let e = b.add(&[Request::new(&tokens, &bad_table)]).unwrap_err();
    assert_eq!(e.code, tutti::EINVAL);
    assert!(e.message.contains("outside"), "{}", e);
    assert_eq!(b.wait().unwrap_err().code, tutti::ESTATE);
    drop(b);
    let e = Runtime::open(&[("chunk_tokens", "twelve")]).err().unwrap();
    assert_eq!(e.code, tutti::EINVAL);
    assert_eq!(e.name(), "invalid argument");
    let e = Runtime::open(&[("backend", "nope\0")]).err().unwrap();
    assert_eq!(e.code, tutti::EINVAL);
    drop(rt);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_runtime_is_shared_between_threads() {
    let dir = temp_dir("threads");
    let mut kv = Kv::new(3);
    let rt = open(&dir, &mut kv);
    std::thread::scope(|s| {
        for g in 0..4i32 {
            let rt = &rt;
            s.spawn(move || {
                let tokens: Vec<i32> = (g * 100_000..g * 100_000 + 64).collect();
                let table: Vec<i32> = (4 * g..4 * g + 4).collect();
                run(rt, Op::Store, &[Request::new(&tokens, &table)]).unwrap();
                assert_eq!(rt.lookup(&tokens, None).unwrap(), 64);
            });
        }
    });
    drop(rt);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn every_function_of_the_header_is_bound() {
    let path = std::env::var("TUTTI_HEADER")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../../../include/tutti.h").to_string());
    let header = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {}", path, e));
    let src = include_str!("../src/lib.rs");
    let mut names = Vec::new();
    for part in header.split("TUTTI_API").skip(1) {
        let head = &part[..part.find('(').unwrap_or(0)];
        if let Some(name) = head.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|w| w.starts_with("tutti_")).last() {
            names.push(name.to_string());
        }
    }
    assert!(names.len() >= 20, "found {} functions", names.len());
    let missing: Vec<_> = names.iter().filter(|n| !src.contains(&format!("sys::{}(", n))).collect();
    assert!(missing.is_empty(), "functions of tutti.h missing from the Rust binding: {:?}", missing);
}

#[test]
fn version() {
    assert!(tutti::version().starts_with("0."));
    assert!(tutti::version_number() >= 100);
}
