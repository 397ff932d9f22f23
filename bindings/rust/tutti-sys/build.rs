// SPDX-License-Identifier: Apache-2.0
//! Finds libtutti with pkg-config (package libtutti-dev; PKG_CONFIG_PATH for another prefix,
//! where a build tree's tutti-uninstalled.pc wins, as pkg-config does) and takes the bindings
//! from, in this order: TUTTI_BINDINGS (tutti's CMake build runs bindgen and names the result),
//! the bindgen tool on the tutti.h that pkg-config names (where bindgen is installed), or the
//! bindings checked in (src/bindings.rs, made from this release's tutti.h; a test keeps them
//! current). TUTTI_LIB_DIR, when set, is where libtutti.so is, without pkg-config.
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn pkg_config(args: &[&str]) -> Option<String> {
    let tool = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".into());
    let out = Command::new(tool).args(args).arg("tutti").output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    for v in ["TUTTI_BINDINGS", "TUTTI_LIB_DIR", "PKG_CONFIG_PATH", "PKG_CONFIG"] {
        println!("cargo:rerun-if-env-changed={}", v);
    }
    // Where libtutti is: its directories go to the linker, the first also to the `tutti` crate
    // (DEP_TUTTI_LIB_DIR), which makes it the rpath of what it builds.
    let want = env::var("CARGO_PKG_VERSION").unwrap();
    let mut lib_dirs: Vec<String> = Vec::new();
    if let Ok(dir) = env::var("TUTTI_LIB_DIR") {
        lib_dirs.push(dir);
    } else if let Some(libs) = pkg_config(&["--libs-only-L"]) {
        if pkg_config(&["--atleast-version", &want]).is_none() {
            panic!("pkg-config finds libtutti {}, older than this crate ({}): the C ABI only grows, so \
                    a crate needs a library at least as new", pkg_config(&["--modversion"]).unwrap_or_default(), want);
        }
        lib_dirs.extend(libs.split_whitespace().filter_map(|f| f.strip_prefix("-L")).map(String::from));
    } else {
        println!("cargo:warning=pkg-config does not find tutti (install libtutti-dev, or set PKG_CONFIG_PATH): \
                  linking -ltutti from the linker's default paths");
    }
    for dir in &lib_dirs {
        println!("cargo:rustc-link-search=native={}", dir);
    }
    if let Some(dir) = lib_dirs.first() {
        println!("cargo:lib_dir={}", dir);
    }
    println!("cargo:rustc-link-lib=dylib=tutti");

    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("bindings.rs");
    if let Ok(made) = env::var("TUTTI_BINDINGS") {
        println!("cargo:rerun-if-changed={}", made);
        std::fs::copy(&made, &out).unwrap_or_else(|e| panic!("copy {}: {}", made, e));
        return;
    }
    if let Some(inc) = pkg_config(&["--variable=includedir"]) {
        let header = Path::new(&inc).join("tutti.h");
        println!("cargo:rerun-if-changed={}", header.display());
        let ran = Command::new("bindgen")
            .arg(&header)
            .args(["--allowlist-function", "tutti_.*", "--allowlist-type", "tutti_.*", "--allowlist-var", "TUTTI_.*"])
            .arg("--size_t-is-usize")
            .arg("-o")
            .arg(&out)
            .status();
        if matches!(ran, Ok(s) if s.success()) {
            return;
        }
    }
    println!("cargo:rerun-if-changed=src/bindings.rs");
    std::fs::copy("src/bindings.rs", &out).expect("copy the checked-in src/bindings.rs");
}
