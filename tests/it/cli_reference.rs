//! The CLI reference cannot drift from the argument definitions: docs/cli.md ends with every
//! command's `--help`, generated here from the built binary and compared (`STEADQ_BLESS=1`
//! rewrites that part), every command has its place in the prose above it, and the man page
//! `target/man/steadq.1` is made from the same `--help` texts and must render without a
//! groff warning (`scripts/man.sh` makes and shows it).

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/cli.md");
const BEGIN: &str = "<!-- BEGIN GENERATED: every command's --help (tests/it/cli_reference.rs; STEADQ_BLESS=1 cargo test --test it cli_reference rewrites it) -->";
const END: &str = "<!-- END GENERATED -->";

/// `steadq ARGS --help` as a user who typed `steadq` sees it (argv[0] is `steadq`).
fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_steadq"))
        .arg0("steadq")
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "steadq {args:?} --help: {out:?}");
    let text = String::from_utf8(out.stdout).expect("--help is UTF-8");
    // argh pads some description lines; trailing blanks would not survive an editor.
    let mut t: String = text
        .lines()
        .map(|l| l.trim_end().to_string() + "\n")
        .collect();
    while t.ends_with("\n\n") {
        t.pop();
    }
    t
}

/// The command names of a `--help` text's `Commands:` section, in order.
fn commands(help: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for l in help.lines() {
        if l == "Commands:" {
            inside = true;
        } else if inside && l.is_empty() {
            break;
        } else if inside && l.starts_with("  ") && !l.starts_with("   ") {
            out.push(l.split_whitespace().next().unwrap().to_string());
        }
    }
    out
}

/// Every command path (`[]`, `["init"]`, ..., `["dead", "list"]`) with its `--help`, depth
/// first in the order `--help` lists them.
fn all_helps() -> Vec<(Vec<String>, String)> {
    fn walk(path: Vec<String>, out: &mut Vec<(Vec<String>, String)>) {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        let h = help(&args);
        let subs = commands(&h);
        out.push((path.clone(), h));
        for s in subs {
            let mut p = path.clone();
            p.push(s);
            walk(p, out);
        }
    }
    let mut out = Vec::new();
    walk(Vec::new(), &mut out);
    out
}

/// The generated part of docs/cli.md: one `--help` per command, in a text block.
fn generated(helps: &[(Vec<String>, String)]) -> String {
    let mut g = format!("{BEGIN}\n");
    for (path, h) in helps {
        let name = std::iter::once("steadq")
            .chain(path.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ");
        g += &format!("\n### `{name} --help`\n\n```text\n{h}```\n");
    }
    g += &format!("\n{END}\n");
    g
}

/// Skip where the binary's commands differ from the default build's (the reference is the
/// default build's).
fn other_build() -> bool {
    if cfg!(any(feature = "s3", feature = "appliance")) {
        eprintln!("SKIP: the CLI reference is checked in the default build");
        return true;
    }
    false
}

#[test]
fn the_cli_reference_is_every_commands_help() {
    if other_build() {
        return;
    }
    let helps = all_helps();
    let doc = std::fs::read_to_string(DOC).unwrap();
    let (Some(b), Some(e)) = (doc.find(BEGIN), doc.find(END)) else {
        panic!("docs/cli.md lacks the generated reference between {BEGIN:?} and {END:?}");
    };
    let want = generated(&helps);
    let have = &doc[b..e + END.len() + 1];
    if have != want {
        if std::env::var_os("STEADQ_BLESS").is_some() {
            let new = format!("{}{want}{}", &doc[..b], &doc[e + END.len() + 1..]);
            std::fs::write(DOC, new).unwrap();
            eprintln!("rewrote the generated reference in docs/cli.md");
        } else {
            let diff = have
                .lines()
                .zip(want.lines())
                .enumerate()
                .find(|(_, (a, b))| a != b)
                .map(|(i, (a, b))| format!("line {i}: docs {a:?}, --help {b:?}"))
                .unwrap_or_else(|| "lengths differ".into());
            panic!(
                "docs/cli.md's generated reference differs from --help ({diff}); \
                 rewrite it with STEADQ_BLESS=1 cargo test --test it cli_reference"
            );
        }
    }
    // The prose above names every command (a heading or a list entry starting with it).
    let prose = &doc[..b];
    for (path, _) in helps.iter().filter(|(p, _)| !p.is_empty()) {
        let name = path.join(" ");
        assert!(
            prose.contains(&format!("`{name} ")) || prose.contains(&format!("`{name}`")),
            "docs/cli.md's prose does not describe `{name}`"
        );
    }
}

/// Escape text for a roff line: backslashes, and a control character at its start.
fn roff(text: &str) -> String {
    let t = text.replace('\\', "\\e").replace('-', "\\-");
    if t.starts_with('.') || t.starts_with('\'') {
        format!("\\&{t}")
    } else {
        t
    }
}

/// The man page (man(7) macros) made from the `--help` texts: NAME, SYNOPSIS, DESCRIPTION
/// from `steadq --help`, a subsection per command (usage, description, arguments, options,
/// examples, exit codes), EXIT STATUS from the top-level error codes.
fn man_page(helps: &[(Vec<String>, String)]) -> String {
    let version = env!("CARGO_PKG_VERSION");
    let mut m = format!(
        ".\\\" Generated from `steadq --help` by tests/it/cli_reference.rs; do not edit.\n\
         .TH STEADQ 1 \"\" \"steadq {version}\" \"User Commands\"\n\
         .SH NAME\nsteadq \\- a durable job queue in a directory\n"
    );
    for (path, h) in helps {
        let mut sections: Vec<(&str, Vec<&str>)> = Vec::new();
        for l in h.lines() {
            if !l.starts_with(' ') && l.ends_with(':') && !l.contains(". ") {
                sections.push((l.trim_end_matches(':'), Vec::new()));
            } else if let Some(rest) = l.strip_prefix("Usage: ") {
                sections.push(("Usage", vec![rest]));
                sections.push(("Description", Vec::new()));
            } else if let Some(s) = sections.last_mut() {
                s.1.push(l);
            }
        }
        let top = path.is_empty();
        if !top {
            m += &format!(".SS \"{}\"\n", roff(&path.join(" ")));
        }
        for (title, lines) in &sections {
            let lines: Vec<&str> = lines.iter().copied().filter(|l| !l.is_empty()).collect();
            match *title {
                "Usage" if top => {
                    m += &format!(".SH SYNOPSIS\n.B steadq\n{}\n", roff("<command> [<args>]"))
                }
                "Usage" => m += &format!(".PP\n.B {}\n", roff(lines[0])),
                "Description" if top => {
                    m += &format!(".SH DESCRIPTION\n{}\n", roff(&lines.join(" ")))
                }
                "Description" => m += &format!(".PP\n{}\n", roff(&lines.join(" "))),
                "Examples" => {
                    m += if top {
                        ".SH EXAMPLES\n"
                    } else {
                        ".PP\nExamples:\n"
                    };
                    m += ".RS\n.nf\n";
                    for l in &lines {
                        m += &format!("{}\n", roff(l.trim()));
                    }
                    m += ".fi\n.RE\n";
                }
                "Notes" if top => {
                    m += ".SH NOTES\n";
                    for l in &lines {
                        m += &format!("{}\n", roff(l.trim()));
                    }
                }
                "Error codes" => {
                    m += if top {
                        ".SH \"EXIT STATUS\"\n0 done.\n"
                    } else {
                        ".PP\nExit status:\n"
                    };
                    for l in &lines {
                        let (code, what) = l.trim().split_once(' ').unwrap_or((l.trim(), ""));
                        m += &format!(".TP\n.B {code}\n{}\n", roff(what));
                    }
                }
                _ => {
                    // Options, Positional Arguments, Commands: a name at column 2, its text
                    // from column 20, continued on lines indented further.
                    if top && *title == "Commands" {
                        m += ".SH COMMANDS\n";
                    } else if top {
                        m += &format!(".SH \"{}\"\n", roff(&title.to_uppercase()));
                    } else {
                        m += &format!(".PP\n{}:\n", roff(title));
                    }
                    let mut entries: Vec<(String, String)> = Vec::new();
                    for l in &lines {
                        let body = &l[2.min(l.len())..];
                        if !body.starts_with(' ') {
                            let (name, text) = body.split_once("  ").unwrap_or((body, ""));
                            entries.push((name.trim().to_string(), text.trim().to_string()));
                        } else if let Some(e) = entries.last_mut() {
                            e.1 = format!("{} {}", e.1, body.trim()).trim().to_string();
                        }
                    }
                    for (name, text) in entries {
                        m += &format!(".TP\n.B {}\n{}\n", roff(&name), roff(&text));
                    }
                }
            }
        }
        if top {
            m += ".SH \"COMMAND REFERENCE\"\n";
        }
    }
    m += ".SH \"SEE ALSO\"\nThe guide docs/cli.md of the source, and docs/operations.md.\n";
    m
}

/// Where the man page is written: `<target dir>/man/steadq.1`.
fn man_path() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("man/steadq.1")
}

#[test]
fn the_man_page_is_made_from_the_help_and_renders_without_warnings() {
    if other_build() {
        return;
    }
    let helps = all_helps();
    let page = man_page(&helps);
    let path = man_path();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, &page).unwrap();
    for (p, _) in helps.iter().filter(|(p, _)| !p.is_empty()) {
        assert!(
            page.contains(&format!(".SS \"{}\"", roff(&p.join(" ")))),
            "the man page lacks {p:?}"
        );
    }
    // Every warning on (-ww), output discarded (-z): stderr must stay empty. Without groff
    // the check is skipped with a notice; STEADQ_REQUIRE_GROFF=1 (.ci/run, scripts/man.sh)
    // makes that a failure.
    let out = match Command::new("groff")
        .args(["-man", "-ww", "-z", "-Tutf8"])
        .arg(&path)
        .output()
    {
        Ok(o) => o,
        Err(e) if std::env::var_os("STEADQ_REQUIRE_GROFF").is_none() => {
            eprintln!(
                "SKIP groff check of {}: {e} (apt-get install groff-base)",
                path.display()
            );
            return;
        }
        Err(e) => panic!("groff: {e} (apt-get install groff-base)"),
    };
    assert!(out.status.success(), "groff: {out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "",
        "groff warns about {}",
        path.display()
    );
}
