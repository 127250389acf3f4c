//! The inputs of `augefs bench apps`, made once per invocation in its scratch directory
//! (on the disk under test, read from the page cache by every target alike): a tarball
//! of a system header tree, a git repository of a copy of part of it, a generated C
//! project, an SQL script of autocommit inserts, two C loops (warm lstat of a list of
//! paths, warm random 4 KiB preads) and a file of random bytes.
//!
//! Invariants:
//! - Every target reads the same bytes: the inputs are made before the first target
//!   runs and never change.
//! - Nothing here depends on this source tree: the repository is made from
//!   `/usr/include/linux`, so the command runs from an installed binary.

use crate::loopdev::{command, path_str};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Where the header trees come from.
const HEADERS: &str = "/usr/include";

/// The stat loop: lstat of every path listed in argv[1], argv[2] times; prints the rate.
const STATLOOP_C: &str = r#"#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
int main(int argc, char **argv) {
  if (argc != 3) return 2;
  FILE *f = fopen(argv[1], "r"); int rounds = atoi(argv[2]);
  if (!f) { perror(argv[1]); return 1; }
  char **p = NULL; size_t n = 0, cap = 0; char line[4096];
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    if (n == cap) p = realloc(p, (cap = cap * 2 + 64) * sizeof *p);
    p[n++] = strdup(line);
  }
  struct stat st; struct timespec a, b; clock_gettime(CLOCK_MONOTONIC, &a);
  for (int r = 0; r < rounds; r++)
    for (size_t i = 0; i < n; i++)
      if (lstat(p[i], &st)) { perror(p[i]); return 1; }
  clock_gettime(CLOCK_MONOTONIC, &b);
  printf("%.0f\n", (double)n * rounds / ((b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9));
  return 0;
}
"#;

/// Random 4 KiB preads at aligned offsets of argv[1], argv[2] of them; prints the rate.
const RANDREAD_C: &str = r#"#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
  if (argc != 3) return 2;
  int fd = open(argv[1], O_RDONLY); long reads = atol(argv[2]);
  struct stat st; if (fd < 0 || fstat(fd, &st)) { perror(argv[1]); return 1; }
  long blocks = st.st_size / 4096; char buf[4096]; unsigned long x = 88172645463325252UL;
  if (blocks == 0) { fprintf(stderr, "%s: empty\n", argv[1]); return 1; }
  struct timespec a, b; clock_gettime(CLOCK_MONOTONIC, &a);
  for (long i = 0; i < reads; i++) {
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    if (pread(fd, buf, 4096, (off_t)(x % blocks) * 4096) != 4096) { perror("pread"); return 1; }
  }
  clock_gettime(CLOCK_MONOTONIC, &b);
  printf("%.0f\n", reads / ((b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9));
  return 0;
}
"#;

/// C files of the generated project (plus its main.c).
const PROJECT_FILES: usize = 64;
/// Functions per C file.
const PROJECT_FUNCTIONS: usize = 20;

/// The inputs, by path.
#[derive(Debug)]
pub struct Inputs {
    pub tarball: PathBuf,
    pub repo: PathBuf,
    pub project: PathBuf,
    pub sql: PathBuf,
    pub statloop: PathBuf,
    pub randread: PathBuf,
    pub data: PathBuf,
    pub data_bytes: u64,
}

/// What to make: the header tree to tar (under /usr/include: "." for all of it), the
/// one to make the git repository from, the sqlite rows and the data file's size.
#[derive(Debug, Clone, Copy)]
pub struct Recipe {
    pub tar_tree: &'static str,
    pub repo_tree: &'static str,
    pub sqlite_rows: u64,
    pub data_bytes: u64,
}

fn sh(script: &str) -> Result<(), String> {
    command("sh", &["-c", script]).map(drop)
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Makes the inputs in `dir` (which exists and is empty).
pub fn make(dir: &Path, recipe: Recipe) -> Result<Inputs, String> {
    let d = path_str(dir)?;
    let inputs = Inputs {
        tarball: dir.join("include.tar"),
        repo: dir.join("src"),
        project: dir.join("proj"),
        sql: dir.join("inserts.sql"),
        statloop: dir.join("statloop"),
        randread: dir.join("randread"),
        data: dir.join("data"),
        data_bytes: recipe.data_bytes,
    };
    // The tree's top directory is `include` whatever part of /usr/include it holds.
    let tree = Path::new(HEADERS).join(recipe.tar_tree);
    let tree = path_str(&tree)?;
    sh(&format!(
        "tar -C '{tree}' --transform 's,^\\.,include,' -cf '{d}/include.tar' ."
    ))?;
    let repo_tree = Path::new(HEADERS).join(recipe.repo_tree);
    let repo_tree = path_str(&repo_tree)?;
    sh(&format!(
        "cp -a '{repo_tree}' '{d}/src' && git -C '{d}/src' init -q && \
         git -C '{d}/src' add -A && \
         git -C '{d}/src' -c user.name=bench -c user.email=bench@localhost commit -qm src"
    ))?;
    make_project(&inputs.project)?;
    let mut sql = String::from("CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT);\n");
    for i in 1..=recipe.sqlite_rows {
        sql.push_str(&format!(
            "INSERT INTO t(v) VALUES('row {i} of the benchmark');\n"
        ));
    }
    write(&inputs.sql, &sql)?;
    for (source, binary) in [
        (STATLOOP_C, &inputs.statloop),
        (RANDREAD_C, &inputs.randread),
    ] {
        let c = binary.with_extension("c");
        write(&c, source)?;
        command("cc", &["-O2", "-o", path_str(binary)?, path_str(&c)?])?;
    }
    write_random(&inputs.data, recipe.data_bytes)?;
    Ok(inputs)
}

/// A C project: PROJECT_FILES files of PROJECT_FUNCTIONS small functions, a main.c and
/// a Makefile that builds one object per file and links them.
fn make_project(dir: &Path) -> Result<(), String> {
    std::fs::create_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for i in 1..=PROJECT_FILES {
        let mut c = String::from("#include <stdio.h>\n#include <string.h>\n#include <stdlib.h>\n");
        for j in 1..=PROJECT_FUNCTIONS {
            c.push_str(&format!(
                "int f{i}_{j}(const char *s) {{ char b[64]; snprintf(b, sizeof b, \"%s-{j}\", s);\n  \
                 return (int)strlen(b) * {j} + atoi(s); }}\n"
            ));
        }
        write(&dir.join(format!("m{i}.c")), &c)?;
    }
    write(&dir.join("main.c"), "int main(void) { return 0; }\n")?;
    write(
        &dir.join("Makefile"),
        "SRCS := $(wildcard *.c)\nprog: $(SRCS:.c=.o)\n\t$(CC) -o $@ $^\n%.o: %.c\n\t$(CC) -O2 -c -o $@ $<\n",
    )
}

/// `bytes` of pseudo-random data (xorshift: incompressible enough, and fast).
fn write_random(path: &Path, bytes: u64) -> Result<(), String> {
    let file = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut chunk = vec![0u8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        for word in chunk.chunks_exact_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            word.copy_from_slice(&x.to_le_bytes());
        }
        let n = left.min(chunk.len() as u64) as usize;
        out.write_all(&chunk[..n])
            .map_err(|e| format!("{}: {e}", path.display()))?;
        left -= n as u64;
    }
    out.flush().map_err(|e| format!("{}: {e}", path.display()))
}
