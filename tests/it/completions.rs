//! `steadq completions bash|zsh|fish`: each script is loaded by its real shell and asked to
//! complete a subcommand, an option and a nested subcommand (zsh: parsed, as its completion
//! system needs a terminal). A shell that is not installed is a skip notice.

use crate::common::*;

fn script(shell: &str) -> String {
    let o = steadq(&["completions", shell]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    text(&o.stdout)
}

fn have(shell: &str) -> bool {
    let found = std::process::Command::new(shell)
        .args(["-c", "true"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("skipped: {shell} is not installed");
    }
    found
}

/// Run `shell -c code` with the script in a file; its stdout, and its stderr must be empty.
fn run(shell: &str, script: &str, code: &str) -> String {
    let d = TempDir::new("completions");
    std::fs::create_dir_all(d.path()).unwrap();
    let f = d.path().join("script");
    std::fs::write(&f, script).unwrap();
    let o = std::process::Command::new(shell)
        .args(["-c", &code.replace("SCRIPT", p(&f))])
        .output()
        .unwrap();
    assert!(o.status.success(), "{shell}: {}", text(&o.stderr));
    assert_eq!(text(&o.stderr), "", "{shell} complained");
    text(&o.stdout)
}

#[test]
fn bash_completes_subcommands_options_and_nested_subcommands() {
    let s = script("bash");
    let ask = |words: &str| {
        let n = words.split(' ').count() - 1;
        run(
            "bash",
            &s,
            &format!("source SCRIPT; COMP_WORDS=({words}); COMP_CWORD={n}; _steadq; echo \"${{COMPREPLY[@]}}\""),
        )
    };
    assert_eq!(ask("steadq cl").trim(), "claim");
    assert_eq!(ask("steadq claim --le").trim(), "--lease");
    assert_eq!(ask("steadq dead req").trim(), "requeue");
    assert_eq!(
        ask("steadq completions").trim(),
        "",
        "a positional has no fixed words"
    );
}

#[test]
fn fish_completes_subcommands_options_and_nested_subcommands() {
    if !have("fish") {
        return;
    }
    let s = script("fish");
    let ask = |line: &str| {
        let out = run("fish", &s, &format!("source SCRIPT; complete -C '{line}'"));
        out.lines()
            .map(|l| l.split('\t').next().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(ask("steadq cl"), ["claim"]);
    assert_eq!(ask("steadq claim --le"), ["--lease"]);
    assert_eq!(ask("steadq dead req"), ["requeue"]);
}

#[test]
fn zsh_script_parses_and_names_every_subcommand() {
    let s = script("zsh");
    assert!(
        s.starts_with("#compdef steadq"),
        "{}",
        &s[..40.min(s.len())]
    );
    for cmd in [
        "init",
        "enqueue",
        "claim",
        "work",
        "dead",
        "requeue",
        "completions",
    ] {
        assert!(s.contains(cmd), "no {cmd} in the zsh script");
    }
    if have("zsh") {
        run("zsh", &s, "zsh -n SCRIPT");
    }
}

#[test]
fn an_unknown_shell_is_refused_by_name() {
    let o = steadq(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("unknown shell 'tcsh'"),
        "{}",
        text(&o.stderr)
    );
    assert!(o.stdout.is_empty());
}
