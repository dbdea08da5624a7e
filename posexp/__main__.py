from posexp.cli import main

main()
