// SPDX-License-Identifier: Apache-2.0
//! The bindings are generated from tutti.h by bindgen when tutti is built (CMake runs it and
//! names the result in TUTTI_BINDINGS); nothing is written by hand. TUTTI_LIB_DIR is where
//! libtutti.so is.
use std::env;
use std::path::PathBuf;

fn main() {
    let bindings = env::var("TUTTI_BINDINGS")
        .expect("TUTTI_BINDINGS must name the bindgen output (build tutti with CMake: it sets it for cargo)");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("bindings.rs");
    std::fs::copy(&bindings, &out).unwrap_or_else(|e| panic!("copy {}: {}", bindings, e));
    println!("cargo:rerun-if-env-changed=TUTTI_BINDINGS");
    println!("cargo:rerun-if-changed={}", bindings);
    if let Ok(dir) = env::var("TUTTI_LIB_DIR") {
        println!("cargo:rustc-link-search=native={}", dir);
        println!("cargo:lib_dir={}", dir);
    }
    println!("cargo:rerun-if-env-changed=TUTTI_LIB_DIR");
    println!("cargo:rustc-link-lib=dylib=tutti");
}
