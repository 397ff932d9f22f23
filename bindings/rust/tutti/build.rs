// SPDX-License-Identifier: Apache-2.0
//! Embeds the directory of libtutti.so (from tutti-sys) as an rpath, so tests and programs run
//! without LD_LIBRARY_PATH.
fn main() {
    if let Ok(dir) = std::env::var("DEP_TUTTI_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir);
    }
}
