// SPDX-License-Identifier: Apache-2.0
//! Sample: keep a prompt's KV cache in a tutti pool and stream it back layer by layer (Rust).
//! Opens a pool in a temporary directory, registers a small paged KV cache in host memory,
//! stores one prompt's KV, looks the prompt up, loads it into other blocks layer by layer and
//! checks every byte.
use std::ffi::c_void;
use std::process::ExitCode;

use tutti::{Layout, Memory, Op, Request, Runtime};

const LAYERS: u32 = 4;
const BLOCKS: u32 = 128;
const BLOCK_TOKENS: u32 = 16;
const KV_HEADS: u32 = 8;
const HEAD_DIM: u32 = 128;
const TOKENS: usize = 1024;
const BLOCK_BYTES: usize = (BLOCK_TOKENS * KV_HEADS * HEAD_DIM * 2) as usize;
const LAYER_BYTES: usize = 2 * BLOCKS as usize * BLOCK_BYTES;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sample: {}", e);
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("tutti-sample-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    // vLLM-style: per layer one fused [2, blocks, block_tokens, kv_heads, head_dim] fp16 tensor.
    let mut kv: Vec<u8> = (0..LAYERS as usize * LAYER_BYTES).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    let base = kv.as_mut_ptr();
    let layout = Layout {
        layers: LAYERS, blocks: BLOCKS, block_tokens: BLOCK_TOKENS, kv_heads: KV_HEADS, head_dim: HEAD_DIM,
        elem_bytes: 2, hnd: false, memory: Memory::Host,
        // Safety (pointer arithmetic): each offset stays inside kv.
        k: (0..LAYERS as usize).map(|l| unsafe { base.add(l * LAYER_BYTES) } as *mut c_void).collect(),
        v: None, v_offset: None, k_only: false,
    };
    let prompt: Vec<i32> = (0..TOKENS as i32).map(|i| 1000 + 7 * i).collect();
    let stored_in: Vec<i32> = (0..(TOKENS as u32 / BLOCK_TOKENS) as i32).collect();
    let loaded_into: Vec<i32> = stored_in.iter().map(|b| b + stored_in.len() as i32).collect();

    let pool = dir.join("kv.pool");
    let rt = Runtime::open(&[("pool", pool.to_str().unwrap()), ("capacity", "1G")])?;
    // Safety: kv outlives rt (rt is dropped at the end of this function, kv after it).
    unsafe { rt.register_kv(&layout)? };
    let mut b = rt.batch(Op::Store)?;
    b.add(&[Request::new(&prompt, &stored_in)])?;
    b.submit()?;
    b.wait()?;
    drop(b);
    let hit = rt.lookup(&prompt, None)?;
    println!("stored {} tokens with backend {}; lookup finds {} cached tokens", TOKENS, rt.backend(), hit);

    let mut b = rt.batch(Op::Load)?;
    b.add(&[Request::new(&prompt[..hit], &loaded_into)])?;
    b.submit()?;
    for layer in 0..LAYERS {
        b.wait_layer(layer)?; // the engine would run this layer's attention now
        // Safety: the layer is in place and no I/O touches it any more; read it through the base.
        let mem = unsafe { std::slice::from_raw_parts(base, kv.len()) };
        let at = |side: usize, blk: i32| {
            let o = layer as usize * LAYER_BYTES + side * LAYER_BYTES / 2 + blk as usize * BLOCK_BYTES;
            &mem[o..o + BLOCK_BYTES]
        };
        for side in 0..2 {
            for (s, l) in stored_in.iter().zip(&loaded_into) {
                if at(side, *s) != at(side, *l) {
                    return Err(format!("layer {}: bytes differ in block {}", layer, l).into());
                }
            }
        }
        println!("layer {}: in place, bytes match", layer);
    }
    b.wait()?;
    drop(b);
    drop(rt);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
