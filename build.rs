// `sqlx::migrate!` embeds the migration files at compile time; without this, a migration
// added or edited after the last build is not in the binary until some Rust file changes.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
