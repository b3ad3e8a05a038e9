//! Stamps the commit the benches are built from into them (`BENCH_BUILD_COMMIT`): every
//! results file says what it measured. `git describe --always --dirty` of the checkout, or
//! "unknown" where git or the repository is missing (a copy without `.git`).

fn main() {
    let commit = std::process::Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=7"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=BENCH_BUILD_COMMIT={commit}");
    // Rebuilt when HEAD moves or the index changes (a commit, a checkout, an edit staged).
    for path in ["../.git/HEAD", "../.git/index"] {
        if std::path::Path::new(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
