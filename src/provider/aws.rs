//! AWS credentials as the AWS SDKs find them first: the standard
//! environment variables, else a profile of the shared credentials file.
//! (Single sign-on, assumed roles and instance metadata are `aws-config`'s
//! whole credential chain, a hundred and fifty crates; a key pair or a
//! session's temporary keys, as every CI runner and most services hold
//! them, need neither.)

use aws_credential_types::Credentials;
use std::path::PathBuf;

/// Where credentials were looked for, for a message that says so.
pub const WHERE: &str = "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (AWS_SESSION_TOKEN with temporary keys), or a profile in the shared credentials file (AWS_SHARED_CREDENTIALS_FILE, default ~/.aws/credentials)";

/// The credentials to sign with: the environment's, unless `profile` is
/// named (or `AWS_PROFILE` is set), then that profile's; `Err` says why
/// there are none.
pub fn credentials(profile: Option<&str>) -> Result<Credentials, String> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let named = profile.map(str::to_string).or_else(|| env("AWS_PROFILE"));
    if named.is_none() {
        if let (Some(id), Some(secret)) = (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
            return Ok(Credentials::new(
                id,
                secret,
                env("AWS_SESSION_TOKEN"),
                None,
                "environment",
            ));
        }
    }
    let profile = named.unwrap_or_else(|| "default".into());
    let file = env("AWS_SHARED_CREDENTIALS_FILE")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".aws/credentials")))
        .ok_or("no AWS credentials: HOME is not set and no credentials file is named")?;
    let text = std::fs::read_to_string(&file)
        .map_err(|e| format!("no AWS credentials in the environment, and {}: {e}", file.display()))?;
    let keys = section(&text, &profile).ok_or_else(|| format!("{} has no profile [{profile}]", file.display()))?;
    let get = |k: &str| keys.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    match (get("aws_access_key_id"), get("aws_secret_access_key")) {
        (Some(id), Some(secret)) => Ok(Credentials::new(
            id,
            secret,
            get("aws_session_token"),
            None,
            "shared credentials file",
        )),
        _ => Err(format!(
            "{}: profile [{profile}] lacks aws_access_key_id or aws_secret_access_key",
            file.display()
        )),
    }
}

/// The `key = value` lines of INI section `[name]`.
fn section(text: &str, name: &str) -> Option<Vec<(String, String)>> {
    let mut found = None;
    let mut inside = false;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(header) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            inside = header.trim() == name;
            if inside {
                found.get_or_insert_with(Vec::new);
            }
            continue;
        }
        if let (true, Some((k, v))) = (inside, line.split_once('=')) {
            found
                .get_or_insert_with(Vec::new)
                .push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_profile_is_read_from_its_section_only() {
        let text =
            "# mine\n[default]\naws_access_key_id = A\n[work]\naws_access_key_id=B\naws_secret_access_key = S ; x\n";
        let work = super::section(text, "work").unwrap();
        assert_eq!(work[0], ("aws_access_key_id".into(), "B".into()));
        assert_eq!(super::section(text, "default").unwrap().len(), 1);
        assert!(super::section(text, "none").is_none());
    }
}
