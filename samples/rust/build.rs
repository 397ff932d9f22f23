// SPDX-License-Identifier: Apache-2.0
//! Embeds the directories pkg-config gives for libtutti as an rpath, so the sample runs against
//! the libtutti it was built with (an install under /usr needs none; a build tree does).
fn main() {
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    let libs = std::process::Command::new("pkg-config").args(["--libs-only-L", "tutti"]).output();
    if let Ok(out) = libs {
        for dir in String::from_utf8_lossy(&out.stdout).split_whitespace().filter_map(|f| f.strip_prefix("-L")) {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir);
        }
    }
}
