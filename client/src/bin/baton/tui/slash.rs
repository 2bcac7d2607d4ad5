//! Slash commands: what a submitted line means, and completion of command names, thinking
//! levels and `/queue` subcommands.

/// The thinking levels `pi.session` accepts.
pub(crate) const THINKING_LEVELS: [&str; 6] = ["off", "minimal", "low", "medium", "high", "xhigh"];

/// A command and its one-line help.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spec {
    pub(crate) name: &'static str,
    pub(crate) args: &'static str,
    pub(crate) help: &'static str,
}

/// Every command, in the order `/help` lists them.
pub(crate) const COMMANDS: [Spec; 9] = [
    Spec {
        name: "/steer",
        args: "TEXT",
        help: "steer the running turn (delivered at its next tool boundary)",
    },
    Spec {
        name: "/queue",
        args: "[TEXT | edit N TEXT | rm N | clear]",
        help: "queue a follow-up for when the turn settles; no argument lists the queue",
    },
    Spec {
        name: "/abort",
        args: "",
        help: "stop the running turn",
    },
    Spec {
        name: "/model",
        args: "PROVIDER/ID",
        help: "switch the session's model",
    },
    Spec {
        name: "/thinking",
        args: "LEVEL",
        help: "set the thinking level (off minimal low medium high xhigh)",
    },
    Spec {
        name: "/compact",
        args: "[INSTRUCTIONS]",
        help: "summarise older context (when the host offers it)",
    },
    Spec {
        name: "/expand",
        args: "",
        help: "show long tool output whole, or cut it again (Ctrl-O)",
    },
    Spec {
        name: "/detach",
        args: "",
        help: "leave the session running and exit (Ctrl-D)",
    },
    Spec {
        name: "/help",
        args: "",
        help: "this list and the keys",
    },
];

/// The keys, for `/help`.
pub(crate) const KEYS: &str = "Enter send (steer while a turn runs) · Alt-Enter queue a follow-up while a turn runs, \
else newline · Ctrl-J newline · Up/Down history · Tab complete · Ctrl-G $EDITOR · Ctrl-O expand \
output · PgUp/PgDn scroll · Ctrl-C abort (twice while idle: exit) · Ctrl-D detach · \
!cmd run on the host · !!cmd run, kept out of the model's context";

/// What a submitted line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SlashCommand {
    /// Plain text: a prompt (or a steer while a turn runs).
    Text(String),
    /// `!cmd` / `!!cmd`.
    Bash {
        command: String,
        exclude: bool,
    },
    Steer(String),
    /// `/queue TEXT`.
    Queue(String),
    QueueList,
    QueueEdit {
        index: usize,
        text: String,
    },
    QueueRemove(usize),
    QueueClear,
    Abort,
    Model {
        provider: String,
        id: String,
    },
    Thinking(String),
    Compact(Option<String>),
    Expand,
    Detach,
    Help,
    /// A malformed command: the message says what is wrong.
    Invalid(String),
}

fn split_word(s: &str) -> (&str, &str) {
    let s = s.trim_start();
    match s.split_once(char::is_whitespace) {
        Some((w, rest)) => (w, rest.trim()),
        None => (s, ""),
    }
}

fn index(word: &str) -> Option<usize> {
    word.parse::<usize>()
        .ok()
        .filter(|&n| n >= 1)
        .map(|n| n - 1)
}

/// Parses a submitted line.
pub(crate) fn parse(line: &str) -> SlashCommand {
    if let Some(rest) = line.strip_prefix("!!") {
        return bash(rest, true);
    }
    if let Some(rest) = line.strip_prefix('!') {
        return bash(rest, false);
    }
    if !line.starts_with('/') || line.starts_with("//") {
        // `//text` sends `/text` as a prompt.
        let text = line
            .strip_prefix('/')
            .filter(|_| line.starts_with("//"))
            .unwrap_or(line);
        return SlashCommand::Text(text.to_owned());
    }
    let (name, rest) = split_word(line);
    let need = |what: &str| SlashCommand::Invalid(format!("{name} needs {what}"));
    match name {
        "/steer" if rest.is_empty() => need("text"),
        "/steer" => SlashCommand::Steer(rest.to_owned()),
        "/queue" => {
            let (sub, args) = split_word(rest);
            match sub {
                "" | "list" => SlashCommand::QueueList,
                "clear" => SlashCommand::QueueClear,
                "rm" | "remove" => match index(args) {
                    Some(i) => SlashCommand::QueueRemove(i),
                    None => {
                        SlashCommand::Invalid(format!("/queue {sub} needs a number from the list"))
                    }
                },
                "edit" => {
                    let (n, text) = split_word(args);
                    match (index(n), text.is_empty()) {
                        (Some(i), false) => SlashCommand::QueueEdit {
                            index: i,
                            text: text.to_owned(),
                        },
                        _ => SlashCommand::Invalid(
                            "/queue edit needs a number and the new text".to_owned(),
                        ),
                    }
                }
                _ => SlashCommand::Queue(rest.to_owned()),
            }
        }
        "/abort" => SlashCommand::Abort,
        "/model" if rest.is_empty() => need("PROVIDER/ID"),
        "/model" => match rest.split_once('/') {
            Some((p, id)) if !p.is_empty() && !id.is_empty() => SlashCommand::Model {
                provider: p.to_owned(),
                id: id.to_owned(),
            },
            _ => SlashCommand::Invalid(format!("/model needs PROVIDER/ID, not {rest:?}")),
        },
        "/thinking" if THINKING_LEVELS.contains(&rest) => SlashCommand::Thinking(rest.to_owned()),
        "/thinking" => SlashCommand::Invalid(format!(
            "/thinking needs one of {}",
            THINKING_LEVELS.join(", ")
        )),
        "/compact" => SlashCommand::Compact((!rest.is_empty()).then(|| rest.to_owned())),
        "/expand" => SlashCommand::Expand,
        "/detach" | "/quit" | "/exit" => SlashCommand::Detach,
        "/help" | "/?" => SlashCommand::Help,
        other => SlashCommand::Invalid(format!("unknown command {other}; /help lists them")),
    }
}

fn bash(rest: &str, exclude: bool) -> SlashCommand {
    let command = rest.trim();
    if command.is_empty() {
        return SlashCommand::Invalid("! needs a command, e.g. !ls".to_owned());
    }
    SlashCommand::Bash {
        command: command.to_owned(),
        exclude,
    }
}

/// Completions for a line being typed that starts with `/`: full replacement lines.
/// `compact` says whether to offer `/compact`.
pub(crate) fn complete(line: &str, compact: bool) -> Vec<String> {
    if !line.starts_with('/') || line.contains('\n') {
        return Vec::new();
    }
    match line.split_once(' ') {
        None => COMMANDS
            .iter()
            .filter(|c| compact || c.name != "/compact")
            .filter(|c| c.name.starts_with(line))
            .map(|c| {
                if c.args.is_empty() {
                    c.name.to_owned()
                } else {
                    format!("{} ", c.name)
                }
            })
            .collect(),
        Some(("/thinking", partial)) => THINKING_LEVELS
            .iter()
            .filter(|l| l.starts_with(partial.trim_start()))
            .map(|l| format!("/thinking {l}"))
            .collect(),
        Some(("/queue", partial)) if !partial.contains(' ') => ["list", "edit ", "rm ", "clear"]
            .iter()
            .filter(|s| s.starts_with(partial))
            .map(|s| format!("/queue {s}"))
            .collect(),
        Some(_) => Vec::new(),
    }
}

/// The longest common prefix of `options` (what Tab can insert without choosing).
pub(crate) fn common_prefix(options: &[String]) -> String {
    let Some(first) = options.first() else {
        return String::new();
    };
    let mut end = first.len();
    for o in &options[1..] {
        end = first
            .char_indices()
            .zip(o.chars())
            .take_while(|((_, a), b)| a == b)
            .last()
            .map_or(0, |((i, c), _)| i + c.len_utf8())
            .min(end);
    }
    first[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_and_bang_commands_are_told_apart() {
        assert_eq!(parse("hello"), SlashCommand::Text("hello".into()));
        assert_eq!(
            parse("//etc is a path"),
            SlashCommand::Text("/etc is a path".into())
        );
        assert_eq!(
            parse("!ls -l"),
            SlashCommand::Bash {
                command: "ls -l".into(),
                exclude: false
            }
        );
        assert_eq!(
            parse("!!cat secret"),
            SlashCommand::Bash {
                command: "cat secret".into(),
                exclude: true
            }
        );
        assert!(matches!(parse("!  "), SlashCommand::Invalid(_)));
    }

    #[test]
    fn commands_parse_their_arguments_and_name_what_is_missing() {
        assert_eq!(
            parse("/steer go left"),
            SlashCommand::Steer("go left".into())
        );
        assert_eq!(
            parse("/steer"),
            SlashCommand::Invalid("/steer needs text".into())
        );
        assert_eq!(
            parse("/model openai/gpt-5"),
            SlashCommand::Model {
                provider: "openai".into(),
                id: "gpt-5".into()
            }
        );
        assert!(
            matches!(parse("/model gpt"), SlashCommand::Invalid(m) if m.contains("PROVIDER/ID"))
        );
        assert_eq!(
            parse("/thinking high"),
            SlashCommand::Thinking("high".into())
        );
        assert!(matches!(parse("/thinking max"), SlashCommand::Invalid(m) if m.contains("xhigh")));
        assert_eq!(parse("/compact"), SlashCommand::Compact(None));
        assert_eq!(
            parse("/compact keep the plan"),
            SlashCommand::Compact(Some("keep the plan".into()))
        );
        assert!(
            matches!(parse("/frob"), SlashCommand::Invalid(m) if m.contains("unknown command /frob"))
        );
    }

    #[test]
    fn queue_subcommands_number_entries_from_one() {
        assert_eq!(parse("/queue"), SlashCommand::QueueList);
        assert_eq!(
            parse("/queue then run the tests"),
            SlashCommand::Queue("then run the tests".into())
        );
        assert_eq!(parse("/queue rm 2"), SlashCommand::QueueRemove(1));
        assert_eq!(
            parse("/queue edit 1 new text"),
            SlashCommand::QueueEdit {
                index: 0,
                text: "new text".into()
            }
        );
        assert_eq!(parse("/queue clear"), SlashCommand::QueueClear);
        assert!(matches!(parse("/queue rm 0"), SlashCommand::Invalid(_)));
        assert!(matches!(parse("/queue edit 1"), SlashCommand::Invalid(_)));
    }

    #[test]
    fn completion_offers_commands_levels_and_queue_subcommands() {
        assert_eq!(complete("/th", false), ["/thinking "]);
        assert_eq!(
            complete("/thinking m", false),
            ["/thinking minimal", "/thinking medium"]
        );
        assert_eq!(complete("/queue c", false), ["/queue clear"]);
        assert!(complete("/c", false).is_empty());
        assert_eq!(complete("/c", true), ["/compact "]);
        assert_eq!(complete("/a", false), ["/abort"]);
        assert!(complete("hello", true).is_empty());
        assert_eq!(complete("/", true).len(), COMMANDS.len());
    }

    #[test]
    fn the_common_prefix_is_what_all_options_share() {
        let o = vec![
            "/thinking minimal".to_owned(),
            "/thinking medium".to_owned(),
        ];
        assert_eq!(common_prefix(&o), "/thinking m");
        assert_eq!(common_prefix(&[]), "");
        assert_eq!(common_prefix(&["/abort".to_owned()]), "/abort");
    }
}
