// SPDX-License-Identifier: Apache-2.0
//! The Rust binding against a real pool: bytes stored are the bytes loaded (the pattern of the
//! shared fixture, fixture/mod.rs), requests are copied by their batch, errors carry codes, a
//! runtime is shared between threads.
mod fixture;

use fixture::{open, temp_dir, Kv, Prompt, BLOCKS, LAYERS, POISON};
use tutti::{LookupClient, Op, Request, Runtime};

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
fn fixture_pattern_known_answers() {
    // The values tests/fixture/fixture_test.c checks: the formula is the C fixture's.
    for &((seed, token, pos, layer, side, head, i), want) in fixture::KNOWN.iter() {
        assert_eq!(fixture::byte(seed, token, pos, layer, side, head, i), want,
                   "pattern({}, {}, {}, {}, {}, {}, {})", seed, token, pos, layer, side, head, i);
    }
}

#[test]
fn store_lookup_load_layer_by_layer() {
    let dir = temp_dir("roundtrip");
    let mut kv = Kv::new();
    let rt = open(&dir, &mut kv);
    assert!(rt.backend() == "uring" || rt.backend() == "posix");
    let tokens: Vec<i32> = (1000..1320).collect();
    let stored: Vec<i32> = (0..20).collect();
    let loaded: Vec<i32> = (20..40).collect();
    kv.fill(&Prompt { tokens: &tokens, table: &stored, seed: 0 }, 0, tokens.len());
    let r = run(&rt, Op::Store, &[Request::new(&tokens, &stored)]).unwrap();
    assert_eq!(r[0], tutti::RequestResult { status: 0, chunks: 5, chunks_ok: 5, tokens: 320 });
    assert_eq!(rt.lookup(&tokens, None).unwrap(), 320);
    assert_eq!(rt.lookup(&tokens[..100], None).unwrap(), 64);
    kv.poison();
    let into = Prompt { tokens: &tokens, table: &loaded, seed: 0 };
    let mut b = rt.batch(Op::Load).unwrap();
    b.add(&[Request::new(&tokens, &loaded)]).unwrap();
    b.submit().unwrap();
    for l in 0..LAYERS {
        b.wait_layer(l).unwrap();
        kv.check(&into, 0, tokens.len(), l..l + 1);
    }
    b.wait().unwrap();
    assert_eq!(b.chunk_status(0).unwrap(), vec![0; 5]);
    drop(b);
    kv.check(&into, 0, tokens.len(), 0..LAYERS);
    let s = rt.stats().unwrap();
    assert_eq!(s.stored_chunks, 5);
    assert_eq!(rt.layer_wait_ns().unwrap().len(), LAYERS as usize);
    let waits = rt.histogram(tutti::HistogramKind::LayerWait).unwrap();
    assert_eq!(waits.count, 2 * LAYERS as u64); // the store and the load waited for every layer
    assert_eq!(waits.buckets.iter().sum::<u64>(), waits.count);
    assert_eq!(waits.sum_ns, s.layer_wait_ns);
    assert_eq!(rt.histogram(tutti::HistogramKind::Store).unwrap().count, 1);
    drop(rt);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_forgotten_batch_reads_its_own_copies() {
    // The batch copies its requests' tokens and block tables: forgetting a submitted load and
    // then overwriting and dropping the table cannot send its KV to other blocks.
    let dir = temp_dir("forget");
    let mut kv = Kv::new();
    let rt = open(&dir, &mut kv);
    let tokens: Vec<i32> = (7000..7320).collect();
    let stored: Vec<i32> = (0..20).collect();
    kv.fill(&Prompt { tokens: &tokens, table: &stored, seed: 0 }, 0, tokens.len());
    run(&rt, Op::Store, &[Request::new(&tokens, &stored)]).unwrap();
    kv.poison();
    let mut loaded: Vec<i32> = (20..40).collect();
    let mut b = rt.batch(Op::Load).unwrap();
    b.add(&[Request::new(&tokens, &loaded)]).unwrap();
    b.submit().unwrap();
    std::mem::forget(b);
    loaded.iter_mut().for_each(|x| *x = 0); // other block ids, had the batch kept pointing here
    drop(loaded);
    drop(rt); // waits for every submitted batch, the forgotten one too
    let into: Vec<i32> = (20..40).collect();
    kv.check(&Prompt { tokens: &tokens, table: &into, seed: 0 }, 0, tokens.len(), 0..LAYERS);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn kv_events() {
    let dir = temp_dir("events");
    let mut kv = Kv::new();
    let pool = dir.join("pool");
    let mut rt = Runtime::open(&[("pool", pool.to_str().unwrap()), ("capacity", "64M"), ("chunk_tokens", "64"),
                                 ("staging", "8M"), ("kv_events", "16")]).unwrap();
    // Safety: kv outlives rt (declared before it, dropped after).
    unsafe { rt.register_kv(&kv.layout()) }.unwrap();
    let tokens: Vec<i32> = (1000..1128).collect();
    let table: Vec<i32> = (0..8).collect();
    kv.fill(&Prompt { tokens: &tokens, table: &table, seed: 0 }, 0, tokens.len());
    run(&rt, Op::Store, &[Request::new(&tokens, &table)]).unwrap();
    let (events, dropped) = rt.events(16).unwrap();
    assert_eq!(dropped, 0);
    match (&events[0], &events[1]) {
        (tutti::KvEvent::Stored { key: first, parent: None, tokens: t0 },
         tutti::KvEvent::Stored { parent: Some(parent), tokens: t1, .. }) => {
            assert_eq!((t0.as_slice(), t1.as_slice()), (&tokens[..64], &tokens[64..]));
            assert_eq!(parent, first);
        }
        other => panic!("not two stored chunks in order: {:?}", other),
    }
    assert_eq!(events.len(), 2);
    assert!(rt.events(16).unwrap().0.is_empty());
    drop(rt);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn store_by_layer() {
    let dir = temp_dir("bylayer");
    let mut kv = Kv::new();
    let rt = open(&dir, &mut kv);
    let tokens: Vec<i32> = (3000..3128).collect();
    let stored: Vec<i32> = (0..8).collect();
    let loaded: Vec<i32> = (8..16).collect();
    kv.fill(&Prompt { tokens: &tokens, table: &stored, seed: 0 }, 0, tokens.len());
    let mut b = rt.batch(Op::StoreByLayer).unwrap();
    b.add(&[Request::new(&tokens, &stored)]).unwrap();
    b.submit().unwrap();
    assert_eq!(b.poll().unwrap(), (0, false));
    for l in 0..LAYERS {
        assert_eq!(rt.lookup(&tokens, None).unwrap(), 0);
        b.layer_ready(l, std::ptr::null_mut()).unwrap();
    }
    b.wait().unwrap();
    assert_eq!(b.poll().unwrap(), (LAYERS, true));
    assert_eq!(b.layer_ready(0, std::ptr::null_mut()).unwrap_err().code, tutti::EINVAL);
    drop(b);
    assert_eq!(rt.lookup(&tokens, None).unwrap(), 128);
    kv.poison();
    run(&rt, Op::Load, &[Request::new(&tokens, &loaded)]).unwrap();
    kv.check(&Prompt { tokens: &tokens, table: &loaded, seed: 0 }, 0, tokens.len(), 0..LAYERS);
    drop(rt);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_lease_pins_what_it_found() {
    let dir = temp_dir("lease");
    let mut kv = Kv::new();
    let rt = open(&dir, &mut kv);
    let tokens: Vec<i32> = (5000..5128).collect();
    let table: Vec<i32> = (0..8).collect();
    kv.fill(&Prompt { tokens: &tokens, table: &table, seed: 0 }, 0, tokens.len());
    run(&rt, Op::Store, &[Request::new(&tokens, &table)]).unwrap();
    let lease = rt.lookup_lease(&tokens, None, 0).unwrap();
    assert_eq!(lease.tokens, 128);
    assert_eq!(rt.lookup_lease(&tokens[..10], None, 5).unwrap().tokens, 0);
    drop(rt); // a lease may outlive its runtime
    drop(lease);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_client_looks_up_in_another_runtime() {
    let dir = temp_dir("lookup-client");
    let mut kv = Kv::new();
    let sock = dir.join("lookup.sock");
    let (pool, sock) = (dir.join("pool"), sock.to_str().unwrap().to_string());
    let rt = Runtime::open(&[("pool", pool.to_str().unwrap()), ("capacity", "64M"), ("chunk_tokens", "64"),
                             ("staging", "8M"), ("lookup_socket", &sock)]).unwrap();
    // Safety: kv outlives rt.
    unsafe { rt.register_kv(&kv.layout()) }.unwrap();
    let tokens: Vec<i32> = (7000..7150).collect();
    let table: Vec<i32> = (0..10).collect();
    kv.fill(&Prompt { tokens: &tokens, table: &table, seed: 0 }, 0, tokens.len());
    run(&rt, Op::Store, &[Request::new(&tokens, &table)]).unwrap();
    let client = LookupClient::connect(&sock, 5000).unwrap();
    assert_eq!(client.lookup(&tokens, None).unwrap(), 128);
    assert_eq!(client.lookup(&tokens, Some(b"other")).unwrap(), 0);
    let (hit, lease) = client.lookup_lease(&tokens, None, 0).unwrap();
    assert_eq!(hit, 128);
    client.release(lease).unwrap();
    // A stranger's bytes: an error, a hang-up, and a warning in the log.
    static WARNINGS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    tutti::set_log_callback(Some(|level, msg| if level == tutti::LOG_WARN { WARNINGS.lock().unwrap().push(msg.to_string()) }),
                            tutti::LOG_WARN);
    {
        use std::io::{Read, Write};
        let mut raw = std::os::unix::net::UnixStream::connect(&sock).unwrap();
        raw.write_all(&[0xa5u8; 64]).unwrap();
        let mut sink = Vec::new();
        let _ = raw.read_to_end(&mut sink); // EOF, or a reset for the bytes it left unread
        assert!(sink.len() >= 24, "no reply before the hang-up");
    }
    for _ in 0..500 {
        if !WARNINGS.lock().unwrap().is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    tutti::set_log_callback(None, 0);
    let warnings = WARNINGS.lock().unwrap().clone();
    assert_eq!(warnings.len(), 1, "{:?}", warnings);
    assert!(warnings[0].contains("hung up"), "{}", warnings[0]);
    assert_eq!(client.lookup(&tokens, None).unwrap(), 128);
    drop(rt); // the serving runtime goes: a miss, as EIO
    assert_eq!(client.lookup(&tokens, None).unwrap_err().code, tutti::EIO);
    assert_eq!(LookupClient::connect(&sock, 0).err().unwrap().code, tutti::EIO);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn salts_ranges_and_errors() {
    let dir = temp_dir("errors");
    let mut kv = Kv::new();
    let rt = open(&dir, &mut kv);
    let tokens: Vec<i32> = (0..128).collect();
    let table: Vec<i32> = (0..8).collect();
    let prompt = Prompt { tokens: &tokens, table: &table, seed: 7 };
    kv.fill(&prompt, 0, tokens.len());
    let salted = Request { salt: Some(b"lora-7"), ..Request::new(&tokens, &table) };
    run(&rt, Op::Store, &[salted]).unwrap();
    assert_eq!(rt.lookup(&tokens, None).unwrap(), 0);
    assert_eq!(rt.lookup(&tokens, Some(b"lora-7")).unwrap(), 128);
    kv.poison();
    let second = Request { token_begin: 64, ..salted };
    assert_eq!(run(&rt, Op::Load, &[second]).unwrap()[0].tokens, 64);
    kv.check(&prompt, 64, 128, 0..LAYERS);
    for l in 0..LAYERS {
        for side in 0..2 {
            for &b in &table[..4] {
                // the first chunk was not asked for
                assert!(kv.block(l, side, b).iter().all(|&x| x == POISON), "layer {} side {} block {}", l, side, b);
            }
        }
    }

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
    let mut kv = Kv::new();
    let rt = open(&dir, &mut kv);
    let tokens: Vec<Vec<i32>> = (0..4i32).map(|g| (g * 100_000..g * 100_000 + 64).collect()).collect();
    let stored: Vec<Vec<i32>> = (0..4i32).map(|g| (4 * g..4 * g + 4).collect()).collect();
    let loaded: Vec<Vec<i32>> = (0..4i32).map(|g| (16 + 4 * g..16 + 4 * g + 4).collect()).collect();
    for g in 0..4 {
        kv.fill(&Prompt { tokens: &tokens[g], table: &stored[g], seed: 0 }, 0, 64);
    }
    std::thread::scope(|s| {
        for g in 0..4 {
            let (rt, tokens, stored, loaded) = (&rt, &tokens[g], &stored[g], &loaded[g]);
            s.spawn(move || {
                run(rt, Op::Store, &[Request::new(tokens, stored)]).unwrap();
                assert_eq!(rt.lookup(tokens, None).unwrap(), 64);
                assert_eq!(run(rt, Op::Load, &[Request::new(tokens, loaded)]).unwrap()[0].tokens, 64);
            });
        }
    });
    for g in 0..4 {
        kv.check(&Prompt { tokens: &tokens[g], table: &loaded[g], seed: 0 }, 0, 64, 0..LAYERS);
    }
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
