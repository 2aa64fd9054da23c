//! `joule models serve-check [URL] [--config FILE]...`: list the models an
//! OpenAI-compatible server serves and check that it serves every
//! model-backed agent of the given Energy Society configs or sweep files
//! (under `llm.model`, or each agent's `model_name`), before a long sweep
//! starts. Fails, naming each missing model, when one is not served.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use crate::energy_society::config::SocietyConfig;
use crate::llm::BackendKind;
use crate::llm::LlmConfig;
use crate::served::api::lists_model;
use crate::served::config::ServedNames;
use crate::served::openai::client_for;
use crate::sweep::cells;

#[derive(Args, Debug)]
pub struct ServeCheckArgs {
    /// The server's API root, e.g. http://127.0.0.1:11434/v1 (default: the
    /// first config's `llm.base_url`).
    pub url: Option<String>,
    /// Energy Society configs or sweep files whose model-backed agents must be served.
    #[arg(long = "config", value_name = "FILE")]
    pub configs: Vec<PathBuf>,
    /// The environment variable holding the API key (default: the config's `llm.api_key_env`).
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Option<String>,
    /// Seconds to wait for the server's answer (one try, not the config's
    /// `llm.timeout_s` and retries): a check answers in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 20.0, value_parser = parse_timeout)]
    pub timeout: f64,
}

/// The longest `--timeout`: an hour.
const MAX_TIMEOUT_S: f64 = 3600.0;

/// `--timeout`: a number of seconds in (0, 3600].
fn parse_timeout(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("expected a number of seconds, got `{s}`"))?;
    if !(v > 0.0 && v <= MAX_TIMEOUT_S) {
        return Err(format!(
            "expected seconds in (0, {MAX_TIMEOUT_S}], got {}",
            crate::energy_society::config::num(v)
        ));
    }
    Ok(v)
}

/// Every society config a file stands for: a sweep file's cells, or the config itself.
fn configs_of(path: &PathBuf) -> anyhow::Result<Vec<SocietyConfig>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("{}: cannot read the file: {e}", path.display()))?;
    let is_sweep = toml::from_str::<toml::Table>(&text)
        .map(|t| t.contains_key("configs") && t.contains_key("seeds"))
        .unwrap_or(false);
    if is_sweep {
        Ok(cells(path, None)?.into_iter().map(|c| c.config).collect())
    } else {
        Ok(vec![SocietyConfig::load(path)?])
    }
}

pub fn run(args: ServeCheckArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let mut configs = Vec::new();
    for p in &args.configs {
        configs.extend(configs_of(p)?);
    }
    let mut llm: LlmConfig = configs.first().map(|c| c.llm.clone()).unwrap_or_default();
    llm.backend = BackendKind::Openai;
    if let Some(u) = &args.url {
        llm.base_url = Some(u.clone());
    }
    if args.api_key_env.is_some() {
        llm.api_key_env = args.api_key_env.clone();
    }
    llm.stand_in = None;
    llm.timeout_s = args.timeout;
    llm.retries = 0;
    if llm.base_url.is_none() {
        anyhow::bail!("give the server's URL (e.g. http://127.0.0.1:11434/v1) or a --config with `llm.base_url`");
    }
    crate::llm::validate(&llm).map_err(|(key, msg)| anyhow::anyhow!("`{key}` {msg}"))?;
    let mut names = ServedNames::default();
    for c in &configs {
        names.add(
            llm.model.as_deref(),
            c.roster.iter().enumerate().map(|(i, a)| {
                (
                    format!("{}: roster[{i}]", c.name),
                    a.model.as_str(),
                    a.model_name.as_str(),
                )
            }),
        )?;
    }
    let client = client_for(&llm.served())?;
    let asked = std::time::Instant::now();
    let listed = client.models().map_err(|f| {
        // A port that accepts connections and never answers (a hung server,
        // another program) ends at the timeout: say so in words.
        let silent = f.unreachable && asked.elapsed().as_secs_f64() >= 0.9 * args.timeout;
        if silent {
            anyhow::anyhow!(
                "cannot list the models of {}: no HTTP answer within {} s ({})",
                client.base_url(),
                crate::energy_society::config::num(args.timeout),
                f.message
            )
        } else {
            anyhow::anyhow!(
                "cannot list the models of {}: {}",
                client.base_url(),
                f.message
            )
        }
    })?;
    writeln!(
        out,
        "{} serves {} model(s):",
        client.base_url(),
        listed.len()
    )?;
    for m in &listed {
        // The server's own text: escaped, so that it cannot drive the terminal.
        writeln!(out, "  {}", crate::shown::terminal(m))?;
    }
    if names.is_empty() {
        return Ok(());
    }
    writeln!(out, "models of the configs:")?;
    let mut missing = Vec::new();
    for (key, served) in names.iter() {
        let ok = lists_model(&listed, served);
        writeln!(
            out,
            "  {:<8} {served}{}",
            if ok { "ok" } else { "MISSING" },
            if key == served {
                String::new()
            } else {
                format!(" (model key {key})")
            }
        )?;
        if !ok {
            missing.push(served.to_string());
        }
    }
    if !missing.is_empty() {
        anyhow::bail!(
            "the server at {} does not serve {}",
            client.base_url(),
            missing
                .iter()
                .map(|m| format!("`{m}`"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The model ids a server lists are printed with their control
    /// characters escaped: they cannot retitle, clear or colour the terminal.
    #[test]
    fn listed_model_ids_are_printed_escaped() {
        let url = crate::served::openai::tests::route_server(
            vec![(
                "/v1/models",
                r#"{"data":[{"id":"\u001b]0;pwned\u0007\u001b[2J\u001b[31mevil"},{"id":"qwen3:8b"}]}"#,
            )],
            (404, "{}"),
        );
        let args = ServeCheckArgs {
            url: Some(url),
            configs: Vec::new(),
            api_key_env: None,
            timeout: 5.0,
        };
        let mut out = Vec::new();
        run(args, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("serves 2 model(s):\n"), "{text}");
        assert!(
            text.contains("\n  \\u{1b}]0;pwned\\u{7}\\u{1b}[2J\\u{1b}[31mevil\n"),
            "{text}"
        );
        assert!(text.contains("\n  qwen3:8b\n"), "{text}");
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{text:?}"
        );
    }
}
