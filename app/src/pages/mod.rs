pub mod inbox;
pub mod not_found;
