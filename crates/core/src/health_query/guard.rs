//! Where a tenant's query is read: every check and parse of a query runs here, in every binary
//! (the controller, the plugin, the benchmark), on a thread of its own whose stack size is set
//! here, never on the caller's. The depth a query may reach is bounded before its parse
//! (`reading`), and the parser's recursion stays well inside this stack in a debug build too
//! (a test parses the deepest query allowed, in every form, here); a panic inside the parser is
//! a refusal, never a crash of the thread or the process that asked.

/// The stack of the thread that reads a query.
pub const PARSER_STACK_SIZE: usize = 4 << 20;

/// Runs `read` on a thread with [`PARSER_STACK_SIZE`] of stack; a panic in it is a refusal.
pub(super) fn guarded<T: Send>(
    read: impl FnOnce() -> Result<T, String> + Send,
) -> Result<T, String> {
    std::thread::scope(|scope| {
        let reader = std::thread::Builder::new()
            .name("health-query".into())
            .stack_size(PARSER_STACK_SIZE)
            .spawn_scoped(scope, read)
            .map_err(|e| format!("could not be read: no thread to parse it on ({e})"))?;
        reader.join().unwrap_or_else(|_| {
            Err("is not PromQL: the parser failed on it (a number or duration out of range is the usual cause)".into())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_while_reading_is_a_refusal_and_the_caller_goes_on() {
        let refused: Result<(), String> = guarded(|| panic!("the parser failed"));
        assert!(refused.is_err_and(|why| why.contains("the parser failed on it")));
        assert_eq!(
            guarded(|| Ok(std::thread::current().name().map(String::from))),
            Ok(Some("health-query".into()))
        );
    }
}
