from perfpredict.cli import main

main()
