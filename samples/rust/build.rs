// SPDX-License-Identifier: Apache-2.0
//! Embeds the directory of libtutti.so (TUTTI_LIB_DIR, set by tutti's CMake) as an rpath.
fn main() {
    println!("cargo:rerun-if-env-changed=TUTTI_LIB_DIR");
    if let Ok(dir) = std::env::var("TUTTI_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir);
    }
}
