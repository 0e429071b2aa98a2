//! The architecture, held to the code where Cargo cannot hold it (inside a crate): data flows one
//! way through the floors each crate's `lib.rs` declares once ([`failover::LAYERS`] for the
//! controller's `src/`, [`failover_core::LAYERS`] for `crates/core/src/`). Each module imports
//! only from its own floor or a lower one, no two modules import each other (directly or round a
//! circle), every module is on a floor, and the table in `lib.rs`'s documentation lists the
//! floors as `LAYERS` does. Between crates, Cargo holds the order.
//!
//! Imports are read from the source text: `use` declarations and paths written in code
//! (`crate::…`, `super::…`, `self::…`, and a child module's name), resolved to the file that
//! defines the module they reach. Comments, strings and `#[cfg(test)]` items are left out;
//! re-exports (`pub use`) and module declarations are structure, not imports.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use failover_core::Layer;

/// A crate whose modules are held to its floors.
struct Crate {
    /// Its source folder, below the repository.
    root: PathBuf,
    /// Its floors.
    layers: &'static [Layer],
}

fn crates() -> [Crate; 2] {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    [
        Crate {
            root: repo.join("src"),
            layers: failover::LAYERS,
        },
        Crate {
            root: repo.join("crates/core/src"),
            layers: failover_core::LAYERS,
        },
    ]
}

/// A module of the library: its path below `crate` (empty for the root) and its file.
#[derive(Debug, Clone)]
struct Module {
    path: Vec<String>,
    file: PathBuf,
}

/// One import: the line it is on and the path as written.
#[derive(Debug, Clone)]
struct Import {
    line: usize,
    written: String,
    target: usize,
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every module file of a library (not `main.rs`, not `bin/`, not test-only files).
fn modules(root: &Path) -> Vec<Module> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("src/").flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(root, &mut files);
    files.sort();
    files
        .into_iter()
        .filter_map(|file| {
            let relative = file.strip_prefix(root).ok()?.to_string_lossy().to_string();
            if relative == "main.rs"
                || relative.starts_with("bin/")
                || relative.ends_with("_tests.rs")
                || relative == "tests.rs"
                || relative.ends_with("/tests.rs")
            {
                return None;
            }
            let mut path: Vec<String> = relative
                .trim_end_matches(".rs")
                .split('/')
                .map(str::to_string)
                .collect();
            if matches!(path.last().map(String::as_str), Some("mod" | "lib")) {
                path.pop();
            }
            Some(Module { path, file })
        })
        .collect()
}

/// The source with comments, string and character literals blanked out (lines kept).
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !ident_before(&chars, i) {
            let hashes = chars[i + 1..].iter().take_while(|c| **c == '#').count();
            if chars.get(i + 1 + hashes) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let end: String = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let start = i;
            i += 2 + hashes;
            while i < chars.len() && !chars[i..].iter().collect::<String>().starts_with(&end) {
                i += 1;
            }
            i = (i + end.len()).min(chars.len());
            out.extend(chars[start..i].iter().map(|c| blank(*c)));
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                let skip = if chars[i] == '\\' { 2 } else { 1 };
                for k in 0..skip {
                    if let Some(c) = chars.get(i + k) {
                        out.push(blank(*c));
                    }
                }
                i += skip;
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && (chars.get(i + 2) == Some(&'\'') || next == Some('\\')) {
            // A character literal ('x' or '\n'); a lifetime has no closing quote.
            let len = if next == Some('\\') {
                chars[i + 2..]
                    .iter()
                    .position(|c| *c == '\'')
                    .map_or(1, |p| p + 3)
            } else {
                3
            };
            out.extend(std::iter::repeat_n(' ', len));
            i += len;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_before(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

/// The code with every `#[cfg(test)]` item blanked out.
fn without_tests(code: &str) -> String {
    let mut out: Vec<char> = code.chars().collect();
    let text: String = out.iter().collect();
    let mut from = 0;
    while let Some(at) = text[from..].find("#[cfg(test)]").map(|p| p + from) {
        let chars: Vec<(usize, char)> = text.char_indices().collect();
        let start = chars.iter().position(|(b, _)| *b == at).unwrap_or(0);
        let mut i = start;
        let mut depth = 0;
        let mut end = chars.len();
        while i < chars.len() {
            match chars[i].1 {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
            i += 1;
        }
        for c in out.iter_mut().take(end).skip(start) {
            if *c != '\n' {
                *c = ' ';
            }
        }
        from = chars.get(end).map_or(text.len(), |(b, _)| *b);
    }
    out.into_iter().collect()
}

/// The full paths a `use` tree names (`a::{b, c::{self, d}}` → `a::b`, `a::c`, `a::c::d`).
fn expand(prefix: &str, tree: &str) -> Vec<String> {
    let tree = tree.trim();
    if let (Some(open), true) = (tree.find('{'), tree.ends_with('}')) {
        let head = tree[..open].trim().trim_end_matches("::");
        let base = join(prefix, head);
        let mut parts = Vec::new();
        let (mut depth, mut current) = (0, String::new());
        for c in tree[open + 1..tree.len() - 1].chars() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(std::mem::take(&mut current));
                    continue;
                }
                _ => {}
            }
            current.push(c);
        }
        parts.push(current);
        return parts
            .iter()
            .filter(|p| !p.trim().is_empty())
            .flat_map(|p| expand(&base, p))
            .collect();
    }
    let name = tree.split(" as ").next().unwrap_or(tree).trim();
    if name == "self" {
        vec![prefix.to_string()]
    } else {
        vec![join(prefix, name)]
    }
}

fn join(prefix: &str, rest: &str) -> String {
    match (prefix.is_empty(), rest.is_empty()) {
        (true, _) => rest.to_string(),
        (_, true) => prefix.to_string(),
        _ => format!("{prefix}::{rest}"),
    }
}

/// The module a written path reaches from `from`, if it is one of the library's.
fn resolve(written: &str, from: &Module, index: &BTreeMap<Vec<String>, usize>) -> Option<usize> {
    let segments: Vec<&str> = written.split("::").map(str::trim).collect();
    let (mut path, rest): (Vec<String>, &[&str]) = match segments.first().copied()? {
        "crate" => (Vec::new(), &segments[1..]),
        "self" => (from.path.clone(), &segments[1..]),
        "super" => {
            let mut path = from.path.clone();
            let mut rest = &segments[..];
            while rest.first() == Some(&"super") {
                path.pop();
                rest = &rest[1..];
            }
            (path, rest)
        }
        child => {
            let mut path = from.path.clone();
            path.push(child.to_string());
            index.get(&path)?;
            path.pop();
            (path, &segments[..])
        }
    };
    for segment in rest {
        path.push((*segment).to_string());
        if !index.contains_key(&path) {
            path.pop();
            break;
        }
    }
    index.get(&path).copied()
}

/// Every import of one module, in the order written.
fn imports(module: &Module, index: &BTreeMap<Vec<String>, usize>) -> Vec<Import> {
    let text = std::fs::read_to_string(&module.file).expect("module file");
    let code = without_tests(&code_only(&text));
    let line_of = |offset: usize| code[..offset].matches('\n').count() + 1;
    let mut found = Vec::new();
    let mut add = |offset: usize, written: String| {
        if let Some(target) = resolve(&written, module, index) {
            found.push(Import {
                line: line_of(offset),
                written,
                target,
            });
        }
    };
    let mut uses = Vec::new();
    let mut at = 0;
    while let Some(start) = find_word(&code[at..], "use").map(|p| p + at) {
        let end = code[start..].find(';').map_or(code.len(), |p| start + p);
        let before = code[..start].trim_end();
        let reexport = before.ends_with("pub") || before.ends_with(')') && before.contains("pub(");
        if !reexport {
            for path in expand("", &code[start + 3..end]) {
                add(start, path);
            }
        }
        uses.push(start..end);
        at = end;
    }
    // Paths in code, outside `use` declarations.
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0
            || !(bytes[i - 1].is_ascii_alphanumeric()
                || bytes[i - 1] == b'_'
                || bytes[i - 1] == b':');
        if starts_word && (bytes[i].is_ascii_alphabetic() || bytes[i] == b'_') {
            let end = (i..bytes.len())
                .find(|&j| {
                    !(bytes[j].is_ascii_alphanumeric() || bytes[j] == b'_' || bytes[j] == b':')
                })
                .unwrap_or(bytes.len());
            let path = &code[i..end];
            if path.contains("::") && !uses.iter().any(|u| u.contains(&i)) {
                add(i, path.trim_end_matches(':').to_string());
            }
            i = end;
        } else {
            i += 1;
        }
    }
    found
}

fn find_word(text: &str, word: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(p) = text[from..].find(word).map(|p| p + from) {
        let before = p == 0 || !(bytes[p - 1].is_ascii_alphanumeric() || bytes[p - 1] == b'_');
        let after = bytes
            .get(p + word.len())
            .is_none_or(|b| b.is_ascii_whitespace());
        if before && after {
            return Some(p);
        }
        from = p + word.len();
    }
    None
}

/// The floor of a module: the floor whose module path is the longest prefix of its path.
fn floor(layers: &[Layer], path: &[String]) -> Option<usize> {
    let name = path.join("::");
    layers
        .iter()
        .enumerate()
        .flat_map(|(floor, layer)| layer.modules.iter().map(move |m| (floor, *m)))
        .filter(|(_, m)| name == *m || name.starts_with(&format!("{m}::")))
        .max_by_key(|(_, m)| m.len())
        .map(|(floor, _)| floor)
}

struct Graph {
    modules: Vec<Module>,
    edges: Vec<Vec<Import>>,
}

fn graph(root: &Path) -> Graph {
    let modules = modules(root);
    let index: BTreeMap<Vec<String>, usize> = modules
        .iter()
        .enumerate()
        .map(|(i, m)| (m.path.clone(), i))
        .collect();
    let edges = modules
        .iter()
        .enumerate()
        .map(|(i, m)| {
            imports(m, &index)
                .into_iter()
                .filter(|import| import.target != i)
                .collect()
        })
        .collect();
    Graph { modules, edges }
}

fn name(module: &Module) -> String {
    let repo = repo();
    module
        .file
        .strip_prefix(&repo)
        .unwrap_or(&module.file)
        .display()
        .to_string()
}

#[test]
fn every_module_is_on_a_floor_that_lib_rs_declares() {
    for krate in crates() {
        let graph = graph(&krate.root);
        let lost: Vec<String> = graph
            .modules
            .iter()
            .filter(|m| !m.path.is_empty() && floor(krate.layers, &m.path).is_none())
            .map(name)
            .collect();
        assert!(
            lost.is_empty(),
            "modules on no floor of LAYERS ({}/lib.rs): {lost:?}",
            krate.root.display()
        );
        for layer in krate.layers {
            for module in layer.modules {
                let path: Vec<String> = module.split("::").map(str::to_string).collect();
                assert!(
                    graph.modules.iter().any(|m| m.path.starts_with(&path)),
                    "LAYERS names `{module}` (floor '{}'), which is no module of {}",
                    layer.name,
                    krate.root.display()
                );
            }
        }
    }
}

#[test]
fn no_module_imports_from_a_floor_above_its_own() {
    let mut wrong = Vec::new();
    for krate in crates() {
        up_imports(&krate, &mut wrong);
    }
    assert!(
        wrong.is_empty(),
        "imports that run back up the pipeline (move the shared part down, see lib.rs):\n{}",
        wrong.join("\n")
    );
}

fn up_imports(krate: &Crate, wrong: &mut Vec<String>) {
    let (graph, layers) = (graph(&krate.root), krate.layers);
    for (from, imports) in graph.edges.iter().enumerate() {
        let module = &graph.modules[from];
        let Some(own) = floor(layers, &module.path) else {
            continue;
        };
        for import in imports {
            let target = &graph.modules[import.target];
            if let Some(theirs) = floor(layers, &target.path).filter(|theirs| *theirs > own) {
                wrong.push(format!(
                    "{}:{} imports `{}` ({}, floor '{}') from floor '{}' below it",
                    name(module),
                    import.line,
                    import.written,
                    name(target),
                    layers[theirs].name,
                    layers[own].name
                ));
            }
        }
    }
}

#[test]
fn no_two_modules_import_each_other_directly_or_round_a_circle() {
    let mut circles = Vec::new();
    for krate in crates() {
        circles_of(&graph(&krate.root), &mut circles);
    }
    assert!(
        circles.is_empty(),
        "modules that import each other:\n{}",
        circles.join("\n")
    );
}

fn circles_of(graph: &Graph, circles: &mut Vec<String>) {
    let n = graph.modules.len();
    let reach = |from: usize| -> BTreeSet<usize> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from];
        while let Some(m) = stack.pop() {
            for import in &graph.edges[m] {
                if seen.insert(import.target) {
                    stack.push(import.target);
                }
            }
        }
        seen
    };
    let reaches: Vec<BTreeSet<usize>> = (0..n).map(reach).collect();
    for (from, imports) in graph.edges.iter().enumerate() {
        for import in imports {
            if reaches[import.target].contains(&from) {
                circles.push(format!(
                    "{}:{} imports `{}` ({}), which imports {} back{}",
                    name(&graph.modules[from]),
                    import.line,
                    import.written,
                    name(&graph.modules[import.target]),
                    name(&graph.modules[from]),
                    if graph.edges[import.target].iter().any(|i| i.target == from) {
                        ""
                    } else {
                        " round a circle"
                    }
                ));
            }
        }
    }
}

#[test]
fn the_table_in_lib_rs_lists_the_floors_in_order() {
    for krate in crates() {
        table_lists_floors(&krate);
    }
}

fn table_lists_floors(krate: &Crate) {
    let (lib, layers) = (krate.root.join("lib.rs"), krate.layers);
    let lib = std::fs::read_to_string(lib).expect("lib.rs");
    let rows: Vec<String> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//! | "))
        .filter_map(|row| row.split(" | ").next())
        .map(|floor| floor.trim().to_string())
        .filter(|floor| floor != "floor" && !floor.starts_with("---"))
        .collect();
    let declared: Vec<&str> = layers.iter().map(|l| l.name).collect();
    assert_eq!(
        rows,
        declared,
        "{}/lib.rs: the table's floors and LAYERS differ",
        krate.root.display()
    );
    for layer in layers {
        let row = lib
            .lines()
            .find(|l| l.starts_with(&format!("//! | {} |", layer.name)))
            .unwrap_or_default();
        for module in layer.modules.iter().filter(|m| **m != "pipeline") {
            assert!(
                row.contains(&format!("[`{module}`]")),
                "{}/lib.rs: the row of floor '{}' does not name [`{module}`]",
                krate.root.display(),
                layer.name
            );
        }
    }
}

#[test]
fn the_import_reader_understands_what_the_code_writes() {
    let code =
        code_only("use crate::a; // crate::b\nlet s = \"crate::c\"; let c = 'x'; fn f<'a>() {}\n");
    assert!(code.contains("crate::a") && !code.contains("crate::b") && !code.contains("crate::c"));
    assert_eq!(
        expand("", "crate::{a::{self, B}, c::D as E}"),
        ["crate::a", "crate::a::B", "crate::c::D"]
    );
    let tests =
        without_tests("use crate::a;\n#[cfg(test)]\nmod tests { use crate::b; }\nuse crate::c;\n");
    assert!(
        tests.contains("crate::a") && !tests.contains("crate::b") && tests.contains("crate::c")
    );
}

#[test]
fn a_reconcile_writes_the_caches_only_where_the_caches_say() {
    // (file, what it may write): the driver's effects learnt in one place, and the group's
    // compare-and-set of its choice.
    let allowed = [
        ("src/pipeline/reconcile.rs", "apis.missing("),
        ("src/pipeline/reconcile.rs", "apis.needed("),
        ("src/pipeline/group.rs", "groups.write()"),
    ];
    let writes = regex::Regex::new(
        r"caches\s*\.\s*(\w+)\s*\.\s*(write\(\)|missing\(|needed\(|upsert\(|remove\(|insert\()",
    )
    .expect("regex");
    let (mut wrong, mut seen) = (Vec::new(), BTreeSet::new());
    for module in modules(&repo().join("src/pipeline")) {
        let code = without_tests(&code_only(
            &std::fs::read_to_string(&module.file).expect("read"),
        ));
        let file = module
            .file
            .strip_prefix(repo())
            .unwrap_or(&module.file)
            .display()
            .to_string();
        for found in writes.captures_iter(&code) {
            let written = format!("{}.{}", &found[1], &found[2]);
            match allowed
                .iter()
                .position(|(f, w)| *f == file && *w == written)
            {
                Some(i) => {
                    seen.insert(i);
                }
                None => wrong.push(format!("{file}: caches.{written}")),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "a reconcile writes the caches where src/sources/caches.rs does not say: {wrong:?}"
    );
    // The reader finds the writes it allows: it would not miss others.
    assert_eq!(
        seen.len(),
        allowed.len(),
        "found only {seen:?} of {allowed:?}"
    );
}
