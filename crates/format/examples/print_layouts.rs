//! Prints every structure's field table as Markdown (the source for docs/FORMAT.md tables).
fn main() {
    for l in format::layout::all_layouts() {
        println!("<!-- layout: {} -->", l.name);
        println!("| offset | size | field |");
        println!("|---:|---:|---|");
        for f in l.fields {
            println!("| {} | {} | `{}` |", f.offset, f.size, f.name);
        }
        println!();
    }
}
