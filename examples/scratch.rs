fn main() {
    let path = std::env::args().nth(1).unwrap();
    let src = std::fs::read_to_string(&path).unwrap();
    match dyc::lang::compile(&path, &src) {
        Ok(m) => print!("{}", dyc::ir::printer::print_module(&m)),
        Err(e) => print!("{e}"),
    }
}
